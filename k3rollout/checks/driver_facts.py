"""One source of facts for the NVIDIA driver procedure: package names per vendor path and
branch, the services that hold the GPU, and the resolution of exact versions from what a
node's repositories offer. Pure: the commands are run by the stage, preflight or the
simulated host, which all read these tables, so the inline steps, the Ansible task files
(given these names as variables) and the simulated repositories cannot drift apart.

Vendor paths (``nvidia_driver_source`` host/group var; default by OS family):

``ubuntu-archive``
    Canonical's server driver packages from the Ubuntu archive, open kernel modules built
    by DKMS: ``nvidia-driver-580-server-open``, ``nvidia-dkms-580-server-open``,
    ``nvidia-utils-580-server``, ``libnvidia-compute-580-server``,
    ``nvidia-kernel-common-580-server``, fabric manager ``nvidia-fabricmanager-580``
    (source fabric-manager-580; it depends on exactly the same
    ``nvidia-kernel-common-580-server`` version). Versions look like
    ``580.95.05-0ubuntu0.22.04.1`` (``...24.04.N`` on noble); ``-0ubuntu1`` exists only in the
    development series. The ``-updates``/``-security`` pockets keep only the newest
    version of each package, so an older pin can stop being downloadable.
    https://packages.ubuntu.com/jammy-updates/nvidia-driver-580-server-open
``ubuntu-archive-precompiled``
    The same, with Canonical's signed precompiled modules
    ``linux-modules-nvidia-580-server-open-$(uname -r)`` instead of DKMS: they load under
    Secure Boot without MOK enrollment, but exist only for the driver version the archive
    currently carries. https://packages.ubuntu.com/noble-updates/linux-modules-nvidia-580-server-open-generic
``cuda-repo``
    NVIDIA's CUDA repository for Ubuntu: ``nvidia-driver-580-open``, ``nvidia-dkms-580-open``,
    ``libnvidia-compute-580``, ``nvidia-kernel-common-580``... versions ``580.95.05-0ubuntu1``;
    no ``-server`` names. From 580 the fabric manager is ``nvidia-fabricmanager`` (before:
    ``nvidia-fabricmanager-575``), version ``580.95.05-1``. NVIDIA keeps old versions.
    https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/ (Ubuntu; "Recent Updates")
``rhel-module``
    RHEL/Rocky 9 from NVIDIA's CUDA repository with DNF module streams:
    ``dnf module enable nvidia-driver:580-open`` then ``dnf install nvidia-open``; leaving the
    575 stream needs ``dnf module reset`` (or ``switch-to``) first. RPM versions
    ``3:580.95.05-1.el9``; fabric manager ``nvidia-fabricmanager`` from 580 (before:
    ``nvidia-fabric-manager``). https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/kernel-modules.html
    (Table 5) and advanced-options.html ("dnf -y module switch-to nvidia-driver:<stream> --allowerasing")

Fabric manager: on NVSwitch systems (HGX H100/H200) it must run and be on exactly the
driver's version, or CUDA init fails with error 802 ("system not yet initialized"); a
mismatch is logged by nv-fabricmanager as "fabric manager NVIDIA GPU driver interface
version X don't match with driver version Y" (https://github.com/NVIDIA/gpu-operator/issues/544).
"""

from __future__ import annotations

import re
from typing import Any

SOURCES = ("ubuntu-archive", "ubuntu-archive-precompiled", "cuda-repo", "rhel-module")

# What holds /dev/nvidia* on a GPU node and must be stopped before the driver changes
# (a module unload fails with "Module nvidia is in use" while one runs). The fabric manager
# comes back first after the reboot: CUDA needs it on NVSwitch systems. The Kubernetes device
# plugin usually runs as a DaemonSet pod (the drain leaves it; the GPU Operator's upgrade
# controller deletes it); where it runs on the host as a systemd unit, as on AKS node images
# (Azure/AgentBaker: nvidia-device-plugin.service), it holds NVML open like DCGM, and starts
# last, once the driver and its services are up.
DEVICE_PLUGIN_SERVICE = "nvidia-device-plugin"
GPU_SERVICES = ("nvidia-fabricmanager", "nvidia-persistenced", "nvidia-dcgm", "dcgm-exporter", DEVICE_PLUGIN_SERVICE)
RESTART_ORDER = ("nvidia-fabricmanager", "nvidia-persistenced", "nvidia-dcgm", "dcgm-exporter", DEVICE_PLUGIN_SERVICE)
FM_SERVICE = "nvidia-fabricmanager"

DNF_MODULE = "nvidia-driver"
# NVSwitch devices show here when the nvidia-nvswitch part of the driver is loaded
NVSWITCH_PROBE = ["ls", "/proc/driver/nvidia-nvswitch/devices"]
# A node whose driver the GPU Operator manages: its driver container mounts the driver
# root here (https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/)
GPU_OPERATOR_PROBE = ["ls", "/run/nvidia/driver"]
# Ubuntu generates the cache under /var/lib/dkms; DKMS signs with this key on Ubuntu
MOK_KEY = "/var/lib/shim-signed/mok/MOK.der"


def default_source(os_family: str) -> str:
    return "rhel-module" if os_family == "RedHat" else "ubuntu-archive"


def source_of(vars_: dict[str, Any], os_family: str) -> str:
    src = str(vars_.get("nvidia_driver_source") or default_source(os_family))
    if src not in SOURCES:
        raise ValueError(f"nvidia_driver_source {src!r} is not one of {', '.join(SOURCES)}")
    return src


def pkg_mgr(source: str) -> str:
    return "dnf" if source == "rhel-module" else "apt"


def uses_dkms(source: str) -> bool:
    return source != "ubuntu-archive-precompiled"


def fabricmanager(source: str, branch: int | str) -> str:
    b = int(branch)
    if source.startswith("ubuntu-archive"):
        return f"nvidia-fabricmanager-{b}"
    if source == "cuda-repo":
        return "nvidia-fabricmanager" if b >= 580 else f"nvidia-fabricmanager-{b}"
    return "nvidia-fabricmanager" if b >= 580 else "nvidia-fabric-manager"


def module_stream(branch: int | str) -> str:
    return f"{int(branch)}-open"


def driver_packages(source: str, branch: int | str, kernel: str = "") -> list[str]:
    """The packages the install names for the driver itself (no fabric manager)."""
    b = int(branch)
    if source.startswith("ubuntu-archive"):
        names = [f"nvidia-driver-{b}-server-open", f"nvidia-utils-{b}-server", f"nvidia-compute-utils-{b}-server",
                 f"libnvidia-compute-{b}-server", f"libnvidia-cfg1-{b}-server", f"nvidia-kernel-common-{b}-server"]
        if source == "ubuntu-archive":
            names += [f"nvidia-dkms-{b}-server-open", f"nvidia-kernel-source-{b}-server-open"]
        return names
    if source == "cuda-repo":
        return [f"nvidia-driver-{b}-open", f"nvidia-dkms-{b}-open", f"nvidia-kernel-source-{b}-open",
                f"nvidia-utils-{b}", f"nvidia-compute-utils-{b}", f"libnvidia-compute-{b}", f"libnvidia-cfg1-{b}",
                f"nvidia-kernel-common-{b}"]
    return ["nvidia-open", "nvidia-driver", "nvidia-driver-libs", "nvidia-driver-cuda", "nvidia-driver-cuda-libs",
            "nvidia-kmod-common", "kmod-nvidia-open-dkms", "nvidia-persistenced"]


def precompiled_module(branch: int | str, kernel: str) -> str:
    return f"linux-modules-nvidia-{int(branch)}-server-open-{kernel}"


def fabric_packages(source: str, branch: int | str) -> list[str]:
    b = int(branch)
    nscq = "libnvidia-nscq" if source == "rhel-module" else f"libnvidia-nscq-{b}"
    return [fabricmanager(source, b), nscq]


def header_packages(source: str, kernel: str) -> list[str]:
    """Kernel headers for the running kernel (DKMS builds against them). RHEL 9:
    ``dnf install kernel-devel-matched kernel-headers`` (NVIDIA driver installation guide,
    RHEL pre-installation actions); Ubuntu: ``apt install linux-headers-$(uname -r)``."""
    if source == "rhel-module":
        return ["kernel-devel-matched", "kernel-headers"]
    return [f"linux-headers-{kernel}"]


def target_names(source: str, branch: int | str, kernel: str, nvswitch: bool) -> list[str]:
    """Every package the install pins for ``branch`` on this node."""
    names = driver_packages(source, branch, kernel)
    if source == "ubuntu-archive-precompiled":
        names.append(precompiled_module(branch, kernel))
    if nvswitch:
        names += fabric_packages(source, branch)
    return names


def upstream(version: str) -> str:
    """``3:580.95.05-1.el9`` / ``580.95.05-0ubuntu0.22.04.1`` -> ``580.95.05``."""
    return version.split(":", 1)[-1].split("-", 1)[0]


def is_driver_package(name: str) -> bool:
    """A package whose version is the driver's (not the toolkit, headers or module shells)."""
    if "container" in name or name.startswith(("linux-", "kernel-")):
        return False
    return name.startswith(("nvidia-", "libnvidia-", "kmod-nvidia"))


def is_precompiled_module(name: str) -> bool:
    """Canonical's signed precompiled module package (``linux-modules-nvidia-575-server-open-6.8.0-45-generic``)."""
    return name.startswith("linux-modules-nvidia-")


def changes_with_driver(name: str) -> bool:
    """A package the driver change replaces: a hold or version lock on it is released for
    the change (recorded) and put back after it."""
    return is_driver_package(name) or is_precompiled_module(name)


def pin(mgr: str, name: str, version: str) -> str:
    """apt ``name=version``; dnf ``name-version-release`` (epoch left out: dnf matches it)."""
    if mgr == "dnf":
        return f"{name}-{version.split(':', 1)[-1]}"
    return f"{name}={version}"


def resolve(names: list[str], target: str, offers: dict[str, list[dict[str, Any]]],
            exact: tuple[str, ...] = ()) -> tuple[dict[str, str], list[str]]:
    """Pick, for each name, the offered version of the ``target`` driver (newest first as
    the repositories list them). Packages not versioned like the driver (headers,
    precompiled module shells) take the first offered version; names in ``exact`` must
    match ``target`` exactly. Returns (name -> version, names not offered)."""
    pins: dict[str, str] = {}
    missing: list[str] = []
    for n in names:
        vers = [o.get("evr") or o["version"] for o in offers.get(n, [])]
        if is_driver_package(n) or n in exact:
            hit = next((v for v in vers if upstream(v) == target), None)
        else:
            hit = vers[0] if vers else None
        if hit is None:
            missing.append(n)
        else:
            pins[n] = hit
    return pins, missing


def offered(name: str, version: str, offers: dict[str, list[dict[str, Any]]]) -> bool:
    """Is exactly this installed version still downloadable? (dnf offers carry an epoch
    that rpm's VERSION-RELEASE leaves out.)"""
    for o in offers.get(name, []):
        if o.get("installed"):
            continue
        v = o.get("evr") or o["version"]
        if v == version or v.split(":", 1)[-1] == version:
            return True
    return False


def branch_of(version: str | None) -> int | None:
    m = re.match(r"^(\d+)\.", version or "")
    return int(m.group(1)) if m else None
