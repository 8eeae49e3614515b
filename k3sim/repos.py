"""Package repositories, holds, module streams, Secure Boot and GPU services of a simulated node.

The names come from ``k3rollout.checks.driver_facts`` (one table for the stage, the
Ansible variables and this model). What each repository offers follows the real ones:

- Ubuntu archive (``-updates``/``-security`` pockets): only the newest version of each
  package, versions ``580.95.05-0ubuntu0.22.04.1``; a newer upload supersedes the one a node
  runs, which then cannot be downloaded again (fault ``rollback_packages_gone``);
- NVIDIA's CUDA repository (Ubuntu ``-0ubuntu1``/``-1``, RHEL ``3:...-1.el9``): every release,
  unless the node's mirror was pruned (the same fault);
- RHEL: ``nvidia-driver`` DNF module streams (``575-open``...). ``dnf install`` only sees the
  enabled stream ("All matches were filtered out by modular filtering"), and an enabled
  stream is not switched by ``module enable`` without ``module reset`` first;
- held packages: ``apt-mark hold`` on Ubuntu; on RHEL the DNF versionlock plugin
  (python3-dnf-plugin-versionlock, ``dnf versionlock add|delete|list``), whose lock list holds
  ``name-epoch:version-release.*`` entries and hides every other version of a locked name
  from ``dnf install`` ("filtered out by exclude filtering"). Without the plugin installed
  ``dnf versionlock`` is "No such command". Output and matching as the plugin's
  (dnf-plugins-core plugins/versionlock.py).
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any

from k3rollout.checks import driver_facts as df

Out = tuple[int, str, str]

# Datacenter driver releases the repositories carry (NVIDIA CUDA Toolkit release notes,
# Table 3: 575.57.08 is CUDA 12.9 U1; 580.65.06/580.82.07/580.95.05 are CUDA 13.0 GA/U1/U2).
REPO_DRIVERS = ("570.172.08", "575.51.03", "575.57.08", "580.65.06", "580.82.07", "580.95.05", "590.48.01")
# Later releases of a branch that supersede the one a node runs (rollback_packages_gone).
SUPERSEDING = {"570": "570.195.03", "575": "575.64.05", "580": "580.105.08", "590": "590.48.01"}
TOOLKIT = {"nvidia-container-toolkit": "1.17.8-1", "nvidia-container-toolkit-base": "1.17.8-1",
           "libnvidia-container1": "1.17.8-1", "libnvidia-container-tools": "1.17.8-1"}
CODENAMES = {"22.04": "jammy", "24.04": "noble"}


def codename(state: dict[str, Any]) -> str:
    return CODENAMES.get(state.get("os_version", "22.04"), "jammy")


def _drivers(state: dict[str, Any]) -> list[str]:
    """Driver versions the node's repositories offer, newest first."""
    src = state["driver_source"]
    orig = state["original_driver"]
    vers = set(REPO_DRIVERS) | {orig}
    gone = "rollback_packages_gone" in state["faults"]
    if gone:
        b = orig.split(".")[0]
        newer = SUPERSEDING.get(b)
        if newer and newer != orig:
            vers.add(newer)
        vers.discard(orig)
    if src.startswith("ubuntu-archive"):
        # the -updates pocket: one version per branch, the newest
        newest: dict[str, str] = {}
        for v in vers:
            b = v.split(".")[0]
            if b not in newest or version_key(v) > version_key(newest[b]):
                newest[b] = v
        vers = set(newest.values())
    return sorted(vers, key=version_key, reverse=True)


def version_key(v: str) -> tuple[int, ...]:
    """A driver version's numeric parts, to order versions by."""
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def version_string(state: dict[str, Any], name: str, v: str) -> str:
    """How this repository spells driver version ``v`` for package ``name``."""
    src = state["driver_source"]
    if src.startswith("ubuntu-archive"):
        return f"{v}-0ubuntu0.{state.get('os_version', '22.04')}.1"
    if src == "cuda-repo":
        return f"{v}-1" if ("fabricmanager" in name or "nscq" in name) else f"{v}-0ubuntu1"
    if "fabric" in name or "nscq" in name:
        return f"{v}-1"
    return f"3:{v}-1.el9"


def installed_form(state: dict[str, Any], version: str) -> str:
    """rpm's VERSION-RELEASE carries no epoch; dpkg keeps it."""
    return version.split(":", 1)[-1] if state["os_family"] == "RedHat" else version


def _kernel_pkg_version(state: dict[str, Any]) -> str:
    k = state["kernel"]
    if state["os_family"] == "RedHat":
        return k.rsplit(".", 1)[0]                    # 5.14.0-503.el9.x86_64 -> 5.14.0-503.el9
    base, _, abi = k.partition("-")                   # 6.8.0-45-generic -> 6.8.0-45.45
    num = abi.split("-")[0]
    return f"{base}-{num}.{num}"


def _source_line(state: dict[str, Any], name: str) -> str:
    src = state["driver_source"]
    if name in TOOLKIT:
        return ("nvidia-container-toolkit" if state["os_family"] == "RedHat"
                else "https://nvidia.github.io/libnvidia-container/stable/deb/amd64  Packages")
    if src == "rhel-module":
        return "baseos" if name.startswith("kernel-") else "cuda-rhel9-x86_64"
    if src == "cuda-repo" and not name.startswith("linux-"):
        osv = state.get("os_version", "22.04").replace(".", "")
        return f"https://developer.download.nvidia.com/compute/cuda/repos/ubuntu{osv}/x86_64  Packages"
    comp = "main" if name.startswith("linux-headers") else ("multiverse" if "fabricmanager" in name or "nscq" in name
                                                            else "restricted")
    return f"http://archive.ubuntu.com/ubuntu {codename(state)}-updates/{comp} amd64 Packages"


def precompiled_driver(state: dict[str, Any], branch: int | str) -> str | None:
    """The driver version Canonical's precompiled modules carry: the archive's current one."""
    vers = [v for v in _drivers(state) if v.split(".")[0] == str(branch)]
    return vers[0] if vers else None


def offers(state: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    """name -> [{version, source}], newest first: every package the repositories carry."""
    src, kernel = state["driver_source"], state["kernel"]
    out: dict[str, list[dict[str, str]]] = {}
    for v in _drivers(state):
        b = v.split(".")[0]
        for n in df.target_names(src, b, kernel, True):
            if n.startswith("linux-modules-nvidia"):
                continue
            out.setdefault(n, []).append({"version": version_string(state, n, v), "source": _source_line(state, n)})
    if src == "ubuntu-archive-precompiled" or src == "ubuntu-archive":
        for b in sorted({v.split(".")[0] for v in _drivers(state)}):
            n = df.precompiled_module(b, kernel)
            out[n] = [{"version": _kernel_pkg_version(state) + "+1", "source": _source_line(state, n)}]
    for n in df.header_packages(src, kernel):
        out[n] = [{"version": _kernel_pkg_version(state), "source": _source_line(state, n)}]
    for n, v in TOOLKIT.items():
        out[n] = [{"version": v, "source": _source_line(state, n)}]
    return out


def initial_packages(state: dict[str, Any], driver: str) -> dict[str, str]:
    src, kernel, b = state["driver_source"], state["kernel"], driver.split(".")[0]
    pk = {n: installed_form(state, version_string(state, n, driver))
          for n in df.target_names(src, b, kernel, state["nvswitch"])}
    fm = df.fabricmanager(src, b)
    if not state.get("fm_installed", True):
        pk.pop(fm, None)                     # an NVSwitch node whose fabric manager was never installed
    elif state.get("fm_version") and fm in pk:
        # installed from elsewhere (a runfile, another repository) at another version
        pk[fm] = installed_form(state, version_string(state, fm, state["fm_version"]))
    if src == "ubuntu-archive-precompiled":
        pk[df.precompiled_module(b, kernel)] = _kernel_pkg_version(state) + "+1"
    if state.get("headers", True):
        for n in df.header_packages(src, kernel):
            pk[n] = _kernel_pkg_version(state)
    pk.update(TOOLKIT)
    return pk


# ---------------------------------------------------------------- apt-cache / apt-mark


def apt_cache(state: dict[str, Any], args: list[str]) -> Out:
    if not args or args[0] not in ("madison", "policy"):
        return 100, "", f"E: k3rollout sim supports apt-cache madison/policy only, got {' '.join(args[:1])}\n"
    names = [a for a in args[1:] if not a.startswith("-")]
    catalog = offers(state)
    out: list[str] = []
    err: list[str] = []
    for pat in names:
        hits = sorted(n for n in set(catalog) | set(state["packages"]) if fnmatch.fnmatchcase(n, pat))
        if not hits:
            if args[0] == "madison":
                err.append(f"N: Unable to locate package {pat}")
            continue
        for n in hits:
            if args[0] == "madison":
                for o in catalog.get(n, []):
                    out.append(f"{n:>30} | {o['version']} | {o['source'].replace('  ', ' ')}")
            else:
                out.extend(_policy(state, n, catalog.get(n, [])))
    return 0, "".join(line + "\n" for line in out), "".join(e + "\n" for e in err)


def _policy(state: dict[str, Any], name: str, offered: list[dict[str, str]]) -> list[str]:
    inst = state["packages"].get(name)
    vers = [o["version"] for o in offered]
    cand = vers[0] if vers else inst
    lines = [f"{name}:", f"  Installed: {inst or '(none)'}", f"  Candidate: {cand or '(none)'}", "  Version table:"]
    rows = list(dict.fromkeys(vers + ([inst] if inst and inst not in vers else [])))
    for v in rows:
        mark = " *** " if v == inst else "     "
        lines.append(f"{mark}{v} {100 if v == inst else 500}")
        for o in offered:
            if o["version"] == v:
                lines.append(f"        500 {o['source']}")
        if v == inst:
            lines.append("        100 /var/lib/dpkg/status")
    return lines


def apt_mark(state: dict[str, Any], args: list[str]) -> Out:
    holds: list[str] = state.setdefault("holds", [])
    if args[:1] == ["showhold"]:
        return 0, "".join(f"{h}\n" for h in sorted(holds)), ""
    if args[:1] in (["hold"], ["unhold"]):
        out = []
        for n in args[1:]:
            if n not in state["packages"]:
                return 100, "", f"E: Unable to locate package {n}\n"
            if args[0] == "hold":
                out.append(f"{n} {'was already set on hold' if n in holds else 'set on hold'}.")
                if n not in holds:
                    holds.append(n)
            else:
                out.append(f"Canceled hold on {n}." if n in holds else f"{n} was already not on hold.")
                if n in holds:
                    holds.remove(n)
        return 0, "".join(o + "\n" for o in out), ""
    return 100, "", "E: k3rollout sim supports apt-mark hold/unhold/showhold only\n"


# ---------------------------------------------------------------- dnf list / module / repoquery


def _dnf_rows(state: dict[str, Any], names: list[str], modular_filter: bool) -> tuple[list[str], list[str]]:
    catalog = offers(state)
    stream = state.get("module_stream")
    installed, available = [], []
    for pat in names:
        for n in sorted(set(catalog) | set(state["packages"])):
            if not fnmatch.fnmatchcase(n, pat):
                continue
            arch = "noarch" if n.startswith(("kmod-", "nvidia-kmod-common", "nvidia-open")) else "x86_64"
            if n in state["packages"]:
                inst = state["packages"][n]
                evr = next((o["version"] for o in catalog.get(n, []) if o["version"].split(":")[-1] == inst), inst)
                installed.append(f"{n + '.' + arch:<42}{evr:<30}@{_source_line(state, n)}")
            for o in catalog.get(n, []):
                if modular_filter and _modular(n) and not _in_stream(stream, o["version"]):
                    continue
                available.append(f"{n + '.' + arch:<42}{o['version']:<30}{o['source']}")
    return installed, available


def _modular(name: str) -> bool:
    return df.is_driver_package(name)


def _in_stream(stream: str | None, version: str) -> bool:
    if stream is None:
        return False                               # after `module reset` nothing modular is active
    want = stream.split("-")[0]
    return df.upstream(version).split(".")[0] == want


def dnf_list(state: dict[str, Any], args: list[str]) -> Out:
    names = [a for a in args if not a.startswith("-")] or ["*"]
    installed, available = _dnf_rows(state, names, modular_filter=True)
    if "--installed" in args:
        available = []
    elif "--showduplicates" not in args:
        seen: set[str] = set()
        available = [r for r in available if not (r.split()[0] in seen or seen.add(r.split()[0]))]
    if not installed and not available:
        return 1, "Last metadata expiration check: 0:12:04 ago.\n", "Error: No matching Packages to list\n"
    out = ["Last metadata expiration check: 0:12:04 ago."]
    if installed:
        out += ["Installed Packages", *installed]
    if available:
        out += ["Available Packages", *available]
    return 0, "\n".join(out) + "\n", ""


def dnf_repoquery(state: dict[str, Any], args: list[str]) -> Out:
    """``dnf repoquery [--disable-modular-filtering] --showduplicates NAME...``: one NEVRA
    per line (``name-epoch:version-release.arch``), what the repositories hold."""
    names = [a for a in args if not a.startswith("-")]
    catalog = offers(state)
    stream = state.get("module_stream")
    flt = "--disable-modular-filtering" not in args
    out = []
    for pat in names:
        for n in sorted(catalog):
            if not fnmatch.fnmatchcase(n, pat):
                continue
            arch = "noarch" if n.startswith(("kmod-", "nvidia-kmod-common", "nvidia-open")) else "x86_64"
            for o in catalog[n]:
                if flt and _modular(n) and not _in_stream(stream, o["version"]):
                    continue
                evr = o["version"] if ":" in o["version"] else "0:" + o["version"]
                out.append(f"{n}-{evr}.{arch}")
    return 0, "Last metadata expiration check: 0:12:04 ago.\n" + "".join(line + "\n" for line in out), ""


def dnf_module(state: dict[str, Any], args: list[str]) -> Out:
    args = [a for a in args if a not in ("-y", "--assumeyes", "--allowerasing")]
    op = args[0] if args else ""
    streams = sorted({f"{v.split('.')[0]}-open" for v in _drivers(state)}, key=lambda s: int(s.split("-")[0]))
    cur = state.get("module_stream")
    head = "Last metadata expiration check: 0:12:04 ago.\n"
    if op == "list":
        only_enabled = "--enabled" in args
        rows = [f"{'Name':<22}{'Stream':<24}{'Profiles':<33}Summary"]
        for s in ["open-dkms", *streams]:
            flags = (" [d]" if s == "open-dkms" else "") + (" [e]" if s == cur else "")
            if only_enabled and s != cur:
                continue
            prof = "default [d], fm" + (" [i]" if s == cur else "") + ", ks"
            rows.append(f"{df.DNF_MODULE:<22}{s + flags:<24}{prof:<33}Nvidia driver for {s} branch")
        if only_enabled and cur is None:
            return 1, head, "Error: No matching Modules to list\n"
        return 0, head + "cuda-rhel9-x86_64\n" + "\n".join(rows) + "\n\nHint: [d]efault, [e]nabled, [x]disabled, " \
                                                                    "[i]nstalled\n", ""
    target = args[1] if len(args) > 1 else ""
    mod, _, stream = target.partition(":")
    stream = stream.split("/")[0]
    if mod != df.DNF_MODULE:
        return 1, head, f"Error: Problems in request:\nmissing groups or modules: {target}\n"
    if op == "reset":
        state["module_stream"] = None
        return 0, head + "Dependencies resolved.\n" + "Resetting modules:\n" + f" {mod}\n" + "Complete!\n", ""
    if op in ("enable", "switch-to"):
        if stream not in streams:
            return 1, head, f"Error: Problems in request:\nmissing groups or modules: {target}\n"
        if op == "enable" and cur not in (None, stream):
            return 1, head, (f"The operation would result in switching of module '{mod}' stream '{cur}' to stream "
                             f"'{stream}'\nError: It is not possible to switch enabled streams of a module unless "
                             "explicitly enabled via configuration option module_stream_switch.\nIt is recommended "
                             "to rather remove all installed content from the module, and reset the module using "
                             f"'dnf module reset <module_name>' command. After you reset the module, you can "
                             "install the other stream.\n")
        state["module_stream"] = stream
        return 0, head + f"Dependencies resolved.\nEnabling module streams:\n {mod:<20}{stream}\nComplete!\n", ""
    return 1, head, f"Error: k3rollout sim supports dnf module list/reset/enable/switch-to, got {op}\n"


def dnf_filtered(state: dict[str, Any], name: str, version: str) -> bool:
    """Would modular filtering hide this NEVRA from ``dnf install``?"""
    return _modular(name) and not _in_stream(state.get("module_stream"), version)


# ---------------------------------------------------------------- Secure Boot, services


def mokutil(state: dict[str, Any], args: list[str]) -> Out:
    if args[:1] == ["--sb-state"]:
        return 0, "SecureBoot enabled\n" if state["secure_boot"] else "SecureBoot disabled\n", ""
    if args[:1] == ["--test-key"] and len(args) > 1:
        if state.get("mok_enrolled"):
            return 1, f"{args[1]} is already enrolled\n", ""
        return 0, f"{args[1]} is not enrolled\n", ""
    return 1, "", "Usage:\n  mokutil OPTIONS [ARGS...]\n"


def services(state: dict[str, Any]) -> dict[str, dict[str, bool]]:
    return state.setdefault("services", {})


def fm_matches(state: dict[str, Any]) -> bool:
    fm = next((v for n, v in state["packages"].items() if "fabric" in n and "dev" not in n), None)
    return bool(state["loaded_driver"]) and fm is not None and df.upstream(fm) == state["loaded_driver"]


def can_start(state: dict[str, Any], unit: str) -> bool:
    if not state["loaded_driver"]:
        return False
    if unit == df.FM_SERVICE:
        return state["nvswitch"] and fm_matches(state)
    return True


def fm_down(state: dict[str, Any]) -> bool:
    """An NVSwitch system whose fabric manager is not running on the driver's version:
    CUDA init fails with error 802 (cudaErrorSystemNotReady)."""
    if not state.get("nvswitch"):
        return False
    if state.get("gpu_operator"):
        # the GPU Operator's driver container starts nv-fabricmanager itself on NVSwitch
        # systems, from the same driver release as the module it loads
        return not state["loaded_driver"]
    svc = services(state).get(df.FM_SERVICE)
    return not (svc and svc["active"] and fm_matches(state))


def fm_journal(state: dict[str, Any]) -> list[str]:
    """nv-fabricmanager's own words when it cannot start (gpu-operator#544)."""
    fm = next((v for n, v in state["packages"].items() if "fabric" in n), None)
    if fm is None:
        return ["systemd[1]: Unit nvidia-fabricmanager.service could not be found."]
    if not state["loaded_driver"]:
        return ["nv-fabricmanager[3228]: fabric manager failed to open NVIDIA GPU driver interface"]
    if df.upstream(fm) != state["loaded_driver"]:
        return ["systemd[1]: Starting NVIDIA fabric manager service...",
                f"nv-fabricmanager[3228]: fabric manager NVIDIA GPU driver interface version {df.upstream(fm)} don't "
                f"match with driver version {state['loaded_driver']}. Please update with matching NVIDIA driver "
                "package.",
                "systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE"]
    return ["systemd[1]: Starting NVIDIA fabric manager service...", "systemd[1]: Started NVIDIA fabric manager service."]


def systemctl(state: dict[str, Any], args: list[str]) -> Out | None:
    """Unit verbs for the GPU services; None for what the caller handles itself."""
    args = [a for a in args if a not in ("--quiet", "-q", "--no-pager")]
    verb = args[0] if args else ""
    now = "--now" in args
    units = [a.removesuffix(".service") for a in args[1:] if not a.startswith("-")]
    svc = services(state)
    if verb in ("is-active", "is-enabled") and units:
        s = svc.get(units[0])
        if verb == "is-enabled":
            if s is None:
                return 4, "", f"Failed to get unit file state for {units[0]}.service: No such file or directory\n"
            return (0, "enabled\n", "") if s["enabled"] else (1, "disabled\n", "")
        if s is None:
            return None
        if s["active"]:
            return 0, "active\n", ""
        return 3, ("failed\n" if s.get("failed") else "inactive\n"), ""
    if verb in ("stop", "start", "restart", "enable", "disable") and units:
        errs = []
        rc = 0
        for u in units:
            s = svc.get(u)
            if s is None:
                if verb in ("stop", "disable"):
                    errs.append(f"Failed to {verb} {u}.service: Unit {u}.service not loaded.")
                    rc = 5
                    continue
                if u in ("docker",):
                    continue
                errs.append(f"Failed to {verb} {u}.service: Unit {u}.service not found.")
                rc = 5
                continue
            if verb in ("enable", "disable"):
                s["enabled"] = verb == "enable"
            if verb == "stop" or (verb == "disable" and now):
                s["active"], s["failed"] = False, False
            if verb in ("start", "restart") or (verb == "enable" and now):
                if can_start(state, u):
                    s["active"], s["failed"] = True, False
                else:
                    s["active"], s["failed"] = False, True
                    errs.append(f"Job for {u}.service failed because the control process exited with error code.\n"
                                f"See \"systemctl status {u}.service\" and \"journalctl -xeu {u}.service\" for "
                                "details.")
                    rc = 1
        return rc, "", "".join(e + "\n" for e in errs)
    return None


def on_boot(state: dict[str, Any]) -> None:
    if state["loaded_driver"]:
        load_options(state)
    for u, s in services(state).items():
        ok = s["enabled"] and can_start(state, u)
        s["active"], s["failed"] = ok, s["enabled"] and not ok


def journalctl(state: dict[str, Any], args: list[str]) -> Out:
    unit = args[args.index("-u") + 1].removesuffix(".service") if "-u" in args and args.index("-u") + 1 < len(args) \
        else ""
    if unit != df.FM_SERVICE:
        return 0, "-- No entries --\n", ""
    return 0, "".join(f"Dec 03 02:14:07 {state['name']} {line}\n" for line in fm_journal(state)), ""


def holders(state: dict[str, Any]) -> list[str]:
    """What keeps the nvidia module in use: GPU services and running GPU containers."""
    held = [u for u, s in services(state).items() if s["active"]]
    held += [n for n, c in state["docker"]["containers"].items() if c.get("status") == "running"]
    # the kubelet's GPU containers hold the devices the device plugin gave them
    held += [c["id"][:13] for c in (state.get("cri") or {}).get("containers", {}).values()
             if c.get("status") == "running" and c.get("gpus")]
    return held


def modprobe(state: dict[str, Any], args: list[str]) -> Out:
    mods = [a for a in args if not a.startswith("-")]
    if "-r" in args or "--remove" in args:
        if not state["loaded_driver"]:
            return 0, "", ""
        if holders(state) and "nvidia" in mods:
            return 1, "", "modprobe: FATAL: Module nvidia is in use.\n"
        state["loaded_driver"] = None
        for s in services(state).values():
            s["active"] = False
        return 0, "", ""
    if mods[:1] == ["nvidia"]:
        if state["loaded_driver"]:
            return 0, "", ""
        if not state["module_version"]:
            return 1, "", f"modprobe: FATAL: Module nvidia not found in directory /lib/modules/{state['kernel']}\n"
        if state["secure_boot"] and not state.get("module_signed", True):
            return 1, "", "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service\n"
        state["loaded_driver"] = state["module_version"]
        load_options(state)
        return 0, "", ""
    return 1, "", "modprobe: ERROR: k3rollout sim loads or removes nvidia only\n"


def ls(state: dict[str, Any], args: list[str]) -> Out:
    paths = [a for a in args if not a.startswith("-")]
    out = []
    for p in paths:
        if p.rstrip("/") == "/proc/driver/nvidia-nvswitch/devices" and state["nvswitch"] and state["loaded_driver"]:
            out += ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
        elif p.rstrip("/") == "/run/nvidia/driver" and state.get("gpu_operator"):
            out += ["bin", "etc", "lib", "usr"]
        elif p.rstrip("/") == "/etc/modprobe.d":
            out += sorted(x.rsplit("/", 1)[-1] for x in state.get("modprobe_d", {}))
        else:
            return 2, "", f"ls: cannot access '{p}': No such file or directory\n"
    return 0, "".join(o + "\n" for o in out), ""


def df_cmd(state: dict[str, Any], args: list[str]) -> Out:
    """``df -B1 --output=target,avail PATH...``"""
    paths = [a for a in args if not a.startswith("-")] or ["/"]
    free = int(state.get("disk_free_gib", 2048)) * 1024 ** 3 - sum(state.get("apt_archives", {}).values())
    out = ["Mounted on          Avail"]
    for p in paths:
        out.append(f"{'/' if not p.startswith('/var') else '/var':<19} {free}")
    return 0, "\n".join(out) + "\n", ""


def grep_modprobe(state: dict[str, Any], args: list[str]) -> Out | None:
    """``grep -rH . /etc/modprobe.d``: every line of every file, prefixed by its path."""
    if not args or args[-1].rstrip("/") != "/etc/modprobe.d":
        return None
    out = []
    for path, text in sorted(state.get("modprobe_d", {}).items()):
        out += [f"{path}:{line}" for line in text.splitlines() if line]
    return (0, "".join(o + "\n" for o in out), "") if out else (1, "", "")


def module_options(state: dict[str, Any]) -> dict[str, str]:
    """The nvidia module's options as /etc/modprobe.d sets them now (``options nvidia`` lines)."""
    opts = {}
    for text in state.get("modprobe_d", {}).values():
        for line in text.splitlines():
            parts = line.split()
            if parts[:2] == ["options", "nvidia"]:
                for kv in parts[2:]:
                    k, _, v = kv.partition("=")
                    opts[k.removeprefix("NVreg_")] = v
    return opts


def load_options(state: dict[str, Any]) -> None:
    """The module reads its options from /etc/modprobe.d when it loads (at boot, or
    ``modprobe nvidia``); a file changed afterwards shows in /proc/driver/nvidia/params only
    after the next load."""
    state["loaded_options"] = module_options(state)


def proc_params(state: dict[str, Any]) -> Out:
    if not state["loaded_driver"]:
        return 1, "", "cat: /proc/driver/nvidia/params: No such file or directory\n"
    opts = state["loaded_options"] if "loaded_options" in state else module_options(state)
    base = {"ResmanDebugLevel": "4294967295", "RmLogonRC": "1", "ModifyDeviceFiles": "1", "DeviceFileUID": "0",
            "DeviceFileGID": "0", "DeviceFileMode": "438", "EnableMSI": "1", "EnableStreamMemOPs": "0",
            "EnableResizableBar": "0", "RegistryDwords": '""', "RmMsg": '""', "OpenRmEnableUnsupportedGpus": "1"}
    base.update(opts)
    return 0, "".join(f"{k}: {v}\n" for k, v in base.items()), ""


# ---------------------------------------------------------------- dnf versionlock

NO_VERSIONLOCK = ("No such command: versionlock. Please use /usr/bin/dnf --help\nIt could be a DNF plugin command, "
                  "try: \"dnf install 'dnf-command(versionlock)'\"\n")
_LOCK = re.compile(r"^(?P<n>.+)-(?P<e>\d+):(?P<v>[^-:]+)-(?P<r>[^-]+)\.(?P<a>[^.]+)$")


def lock_spec(state: dict[str, Any], name: str) -> str | None:
    """The entry ``dnf versionlock add NAME`` writes for the installed package:
    ``name-epoch:version-release.*`` (the plugin's pkgtup2spec; rpm's epoch is 0 when unset)."""
    v = state["packages"].get(name)
    if v is None:
        return None
    epoch = "0"
    if df.is_driver_package(name):
        spelled = version_string(state, name, df.upstream(v))
        epoch = spelled.split(":", 1)[0] if ":" in spelled else "0"
    return f"{name}-{epoch}:{v}.*"


def _lock_forms(entry: str) -> list[str]:
    m = _LOCK.match(entry.lstrip("!"))
    if not m:
        return [entry.lstrip("!")]
    n, e, v, r = m["n"], m["e"], m["v"], m["r"]
    return [entry.lstrip("!"), n, f"{n}-{v}", f"{n}-{v}-{r}", f"{n}-{e}:{v}", f"{n}-{e}:{v}-{r}"]


def _lock_match(entry: str, patterns: list[str]) -> bool:
    """The plugin's ``_match``: the entry itself, or its name (with version, release...)
    matched by a shell-style pattern."""
    return any(fnmatch.fnmatch(f, p) for f in _lock_forms(entry) for p in patterns)


def locked_version(state: dict[str, Any], name: str) -> str | None:
    """VERSION-RELEASE a version lock pins ``name`` to (None: not locked)."""
    for entry in state.get("version_locks", []):
        m = _LOCK.match(entry)
        if m and not entry.startswith("!") and m["n"] == name:
            return f"{m['v']}-{m['r']}"
    return None


def dnf_versionlock(state: dict[str, Any], args: list[str]) -> Out:
    if not state.get("versionlock_plugin"):
        return 1, "", NO_VERSIONLOCK
    args = [a for a in args if a not in ("-y", "--assumeyes", "-q")]
    locks: list[str] = state.setdefault("version_locks", [])
    head = "Last metadata expiration check: 0:12:04 ago.\n"
    sub = args[0] if args else "list"
    pkgs = args[1:]
    if sub == "list":
        return 0, head + "".join(f"{e}\n" for e in locks), ""
    if sub in ("delete", "del"):
        gone = [e for e in locks if _lock_match(e, pkgs)]
        state["version_locks"] = [e for e in locks if e not in gone]
        return 0, head + "".join(f"Deleting versionlock for: {e}\n" for e in gone), ""
    if sub == "clear":
        state["version_locks"] = []
        return 0, head, ""
    if sub != "add":
        pkgs = [sub, *pkgs]                 # `dnf versionlock NAME` adds, as the plugin does
    out = []
    for p in pkgs:
        hit = next((e for e in locks if _lock_match(e, [p])), None)
        if hit is not None:
            out.append(f"Package already locked in equivalent form: {hit}")
            continue
        spec = lock_spec(state, p)
        if spec is None:
            out.append(f"No package found for: {p}")
            continue
        locks.append(spec)
        out.append(f"Adding versionlock on: {spec}")
    return 0, head + "".join(o + "\n" for o in out), ""
