"""Driver-side commands of the simulated node: nvidia-smi, /proc, packages, DKMS, reboot.

Output formats follow the real tools (nvidia-smi 575/580 table and CSV query output,
apt/dpkg and dnf/rpm messages, the DKMS build failure, the NVML version mismatch seen
between a package upgrade and the reboot).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from k3rollout.checks import driver_facts as df
from k3sim import cache, repos

# Driver branch -> CUDA version its nvidia-smi reports (NVIDIA CUDA Toolkit release notes,
# Table 3: 570 -> 12.8, 575 -> 12.9, 580 -> 13.0, 590 -> 13.1).
BRANCH_CUDA = {"535": "12.2", "550": "12.4", "560": "12.6", "570": "12.8", "575": "12.9", "580": "13.0",
               "590": "13.1", "595": "13.2"}

Out = tuple[int, str, str]


def driver_cuda(version: str | None) -> str | None:
    if not version:
        return None
    return BRANCH_CUDA.get(version.split(".")[0])


# What nvidia-smi reports for the GPU models the default cluster runs: memory.total in MiB,
# compute_cap and the board's power cap in W. H200: 143771 MiB, 9.0, 700 W. B300 (HGX B300,
# "NVIDIA B300 SXM6 AC"): 275040 MiB, compute capability 10.3 (sm_103a), 1100 W, as nvidia-smi
# shows it on 580.95.05 and 580.126.09 hosts in public benchmark notes.
GPU_MODELS: dict[str, tuple[int, str, int]] = {
    "NVIDIA H200": (143771, "9.0", 700),
    "NVIDIA B300 SXM6 AC": (275040, "10.3", 1100),
}


def _model_facts(state: dict[str, Any]) -> tuple[int, str, int] | None:
    """The table's row when the node's model is in it and its GiB (k3_gpu_mem_gib, whole GiB)
    is that model's memory."""
    row = GPU_MODELS.get(state["gpu"]["model"])
    return row if row and row[0] // 1024 == state["gpu"]["mem_gib"] else None


def mem_mib(state: dict[str, Any]) -> int:
    gib = state["gpu"]["mem_gib"]
    row = _model_facts(state)
    if row:
        return row[0]
    return 143771 if gib == 141 else gib * 1024 - 613


def compute_cap(state: dict[str, Any]) -> str:
    row = _model_facts(state) or GPU_MODELS.get(state["gpu"]["model"])
    return row[1] if row else "9.0"


def power_cap_w(state: dict[str, Any]) -> int:
    row = GPU_MODELS.get(state["gpu"]["model"])
    return row[2] if row else 700


def userspace_version(state: dict[str, Any]) -> str | None:
    if state.get("gpu_operator"):
        # the GPU Operator's driver container brings its user-space libraries with the
        # module it loads (under /run/nvidia/driver): they always match
        return state["loaded_driver"]
    for name, ver in state["packages"].items():
        if name.startswith("nvidia-utils-") or name == "nvidia-driver":
            return ver.split("-")[0]
    return None


def nvml_error(state: dict[str, Any]) -> Out | None:
    loaded, lib = state["loaded_driver"], userspace_version(state)
    if not loaded:
        return (9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                   "Make sure that the latest NVIDIA driver is installed and running.\n\n", "")
    if lib and lib != loaded:
        short = ".".join(lib.split(".")[:2])
        return (18, f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {short}\n", "")
    return None


def _gpu_used_mib(state: dict[str, Any]) -> int:
    running = [s for s in state["servers"].values() if s.get("status") == "running"]
    return 131204 if running else 0


def _bus_id(i: int) -> str:
    return ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0", "00000000:5D:00.0",
            "00000000:9A:00.0", "00000000:AB:00.0", "00000000:BA:00.0", "00000000:DB:00.0"][i % 8] \
        if i < 8 else f"00000000:{(0x18 + i * 0x11) % 0xff:02X}:00.0"


def nvidia_smi(state: dict[str, Any], args: list[str]) -> Out:
    err = nvml_error(state)
    if err:
        return err
    if args[:1] == ["topo"]:
        return 0, _topo(state), ""
    query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
    if query is None and "--query-gpu" in args:
        query = args[args.index("--query-gpu") + 1]
    if query is not None:
        fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), None)
        if fmt is None and "--format" in args:
            fmt = args[args.index("--format") + 1]
        if not fmt or "csv" not in fmt:
            return 2, "", '"--format" option is required with --query-gpu. See nvidia-smi -h for more information.\n'
        return _query(state, query.split(","), fmt.split(","))
    if args and args != ["-L"]:
        if args[0] in ("-q",):
            return 0, f"Driver Version                            : {state['loaded_driver']}\n" \
                      f"CUDA Version                              : {driver_cuda(state['loaded_driver'])}\n" \
                      f"Attached GPUs                             : {state['gpu']['count']}\n", ""
        return 2, "", "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
    if args == ["-L"]:
        return 0, "".join(f"GPU {i}: {state['gpu']['model']} (UUID: GPU-{uuid.UUID(int=i + 7 * 2**64)})\n"
                          for i in range(state["gpu"]["count"])), ""
    return 0, _table(state), ""


def _query(state: dict[str, Any], fields: list[str], fmt: list[str]) -> Out:
    drv = state["loaded_driver"]
    total = mem_mib(state)
    used = _gpu_used_mib(state)
    units = "nounits" not in fmt
    values = {
        "index": lambda i: str(i),
        "name": lambda i: state["gpu"]["model"],
        "driver_version": lambda i: drv,
        "memory.total": lambda i: f"{total} MiB" if units else str(total),
        "memory.used": lambda i: f"{used} MiB" if units else str(used),
        "memory.free": lambda i: f"{total - used} MiB" if units else str(total - used),
        "pci.bus_id": lambda i: _bus_id(i),
        "uuid": lambda i: f"GPU-{uuid.UUID(int=i + 7 * 2**64)}",
        "temperature.gpu": lambda i: "33",
        "utilization.gpu": lambda i: ("87 %" if used else "0 %") if units else ("87" if used else "0"),
        "persistence_mode": lambda i: "Enabled",
        "compute_cap": lambda i: compute_cap(state),
        "count": lambda i: str(state["gpu"]["count"]),
    }
    header_units = {"memory.total": " [MiB]", "memory.used": " [MiB]", "memory.free": " [MiB]",
                    "utilization.gpu": " [%]"}
    fields = [f.strip() for f in fields]
    for f in fields:
        if f not in values:
            return 2, "", f'Field "{f}" is not a valid field to query.\n\n'
    lines = []
    if "noheader" not in fmt:
        lines.append(", ".join(f + (header_units.get(f, "") if units else "") for f in fields))
    for i in range(state["gpu"]["count"]):
        lines.append(", ".join(values[f](i) for f in fields))
    return 0, "\n".join(lines) + "\n", ""


def _table(state: dict[str, Any]) -> str:
    drv = state["loaded_driver"]
    cuda = driver_cuda(drv)
    total, used = mem_mib(state), _gpu_used_mib(state)
    now = datetime.now().strftime("%a %b %d %H:%M:%S %Y")
    out = [f"{now}       ",
           "+-----------------------------------------------------------------------------------------+",
           f"| NVIDIA-SMI {drv:<22} Driver Version: {drv:<14} CUDA Version: {cuda:<9}|",
           "|-----------------------------------------+------------------------+----------------------+",
           "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                        |               MIG M. |",
           "|=========================================+========================+======================|"]
    for i in range(state["gpu"]["count"]):
        name = state["gpu"]["model"][:24]
        mem = f"{used}MiB / {total}MiB"
        out.append("|" + f"{i:>4}  {name}".ljust(37) + "On  |" + f"{_bus_id(i):>19} Off " + "|" + " " * 20 + "0 |")
        out.append("| N/A   33C    P0".ljust(29) + f"{'402' if used else '117'}W / {power_cap_w(state):>4}W |" + f"{mem:>23} |"
                   + f"{'87' if used else '0':>7}%      Default |")
        out.append("|                                         |                        |             Disabled |")
        out.append("+-----------------------------------------+------------------------+----------------------+")
    out += ["", "+-----------------------------------------------------------------------------------------+",
            "| Processes:                                                                              |",
            "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
            "|        ID   ID                                                               Usage      |",
            "|=========================================================================================|"]
    if used:
        for i in range(state["gpu"]["count"]):
            out.append(f"|  {i:>3}   N/A  N/A          {41230 + i:>7}      C   python3                              "
                       f"{used}MiB |")
    else:
        out.append("|  No running processes found                                                             |")
    out.append("+-----------------------------------------------------------------------------------------+")
    return "\n".join(out) + "\n"


def _topo(state: dict[str, Any]) -> str:
    n = state["gpu"]["count"]
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    rows = [head]
    for i in range(n):
        cells = ["X" if i == j else "NV18" for j in range(n)]
        rows.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{'PIX' if i == 0 else 'SYS'}\t"
                    f"{'0-55' if i < n // 2 else '56-111'}\t{0 if i < n // 2 else 1}\t\tN/A")
    rows += ["", "Legend:", "", "  X    = Self", "  NV#  = Connection traversing a bonded set of # NVLinks"]
    return "\n".join(rows) + "\n"


def proc_version(state: dict[str, Any]) -> Out:
    drv = state["loaded_driver"]
    if not drv:
        return 1, "", "cat: /proc/driver/nvidia/version: No such file or directory\n"
    return 0, (f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {drv}  Release Build  "
               f"(dvs-builder@U22-I3-AE18-23-3)  Tue Jul  8 13:22:41 UTC 2025\n"
               f"GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"), ""


# ---------------------------------------------------------------- packages


def _apt_missing(state: dict[str, Any], name: str, ver: str, catalog: dict) -> str | None:
    if name not in catalog:
        return f"E: Unable to locate package {name}"
    if ver not in [o["version"] for o in catalog[name]]:
        return f"E: Version '{ver}' for '{name}' was not found"
    return None


def _install(state: dict[str, Any], wanted: dict[str, str], tool: str, args: list[str]) -> Out:
    """One apt/dnf transaction over exact versions the repositories offer (sim/repos.py).

    The driver packages must all be one driver version; the fabric manager must be
    exactly that version too (Ubuntu's depends on ``nvidia-kernel-common-NNN-server (= v)``,
    NVIDIA's RPM requires ``nvidia-driver = v``). Another branch's driver packages conflict
    and are removed; a held one stops apt. DKMS builds the module against the running
    kernel's headers; Canonical's precompiled package brings a signed module instead.
    """
    catalog = repos.offers(state)
    head = "Reading package lists...\nBuilding dependency tree...\nReading state information...\n" if tool == "apt" \
        else "Last metadata expiration check: 0:12:04 ago.\n"
    for name, ver in wanted.items():
        if tool == "apt":
            why = _apt_missing(state, name, ver, catalog)
            if why:
                return 100, head, why + "\n"
        else:
            arg = f"{name}-{ver}"
            hit = [o for o in catalog.get(name, []) if o["version"].split(":")[-1] == ver.split(":")[-1]]
            if not hit:
                return 1, head, f"No match for argument: {arg}\nError: Unable to find a match: {arg}\n"
            if repos.dnf_filtered(state, name, hit[0]["version"]):
                return 1, head, (f"All matches were filtered out by modular filtering for argument: {arg}\n"
                                 f"Error: Unable to find a match: {arg}\n")
            lock = repos.locked_version(state, name)
            if lock is not None and lock != hit[0]["version"].split(":")[-1]:
                # the versionlock plugin excludes every other version of a locked name
                return 1, head, (f"All matches were filtered out by exclude filtering for argument: {arg}\n"
                                 f"Error: Unable to find a match: {arg}\n")
            wanted[name] = repos.installed_form(state, hit[0]["version"])
    drivers = {n: df.upstream(v) for n, v in wanted.items() if df.is_driver_package(n)}
    versions = sorted(set(drivers.values()))
    if len(versions) > 1:
        fm = next((n for n in drivers if "fabric" in n), None)
        common = next((n for n in drivers if "kernel-common" in n or n == "nvidia-driver"), None)
        if fm and common and drivers[fm] != drivers[common]:
            if tool == "apt":
                return 100, head, ("Some packages could not be installed. This may mean that you have\n"
                                   "requested an impossible situation.\n\nThe following packages have unmet "
                                   f"dependencies:\n {fm} : Depends: {common} (= {wanted[fm]}) but {wanted[common]} "
                                   "is to be installed\nE: Unable to correct problems, you have held broken "
                                   "packages.\n")
            return 1, head, (f"Error: \n Problem: package {fm}-{wanted[fm]}.x86_64 requires nvidia-driver = "
                             f"3:{wanted[fm]}, but none of the providers can be installed\n")
        return (100, head, "E: Unable to correct problems, you have held broken packages.\n") if tool == "apt" else \
            (1, head, "Error: \n Problem: conflicting requests\n")
    target = versions[0] if versions else None
    pk = state["packages"]
    half = set(state.get("half_configured", []))
    if all(pk.get(n) == v for n, v in wanted.items()) and not (half & set(wanted)) and state["module_version"]:
        # already installed at exactly these versions: apt/dnf do nothing
        if tool == "apt":
            return 0, head + "".join(f"{n} is already the newest version ({v}).\n" for n, v in wanted.items()) + \
                "0 upgraded, 0 newly installed, 0 to remove and 12 not upgraded.\n", ""
        return 0, head + "Dependencies resolved.\nNothing to do.\nComplete!\n", ""
    src, kernel = state["driver_source"], state["kernel"]
    branch = target.split(".")[0] if target else None
    if branch:
        # the metapackage pulls the rest of its branch at the same version
        for n in df.driver_packages(src, branch, kernel):
            if n not in wanted and any(n2 in wanted for n2 in df.driver_packages(src, branch, kernel)):
                wanted[n] = repos.installed_form(state, repos.version_string(state, n, target))
    changing = [n for n in pk if (n in wanted and pk[n] != wanted[n]) or
                (n not in wanted and target and df.is_driver_package(n) and df.upstream(pk[n]) != target)
                or (n not in wanted and branch and n.startswith("linux-modules-nvidia-") and f"-{branch}-" not in n)]
    held = [n for n in changing if n in state.get("holds", [])]
    if tool == "apt" and held and "--allow-change-held-packages" not in args:
        return 100, head + "The following held packages will be changed:\n  " + " ".join(held) + "\n", \
            "E: Held packages were changed and -y was used without --allow-change-held-packages.\n"
    if tool == "apt" and target:
        down = [n for n in wanted if n in pk and df.is_driver_package(n) and _older(wanted[n], pk[n])]
        if down and "--allow-downgrades" not in args:
            return 100, head, "E: Packages were downgraded and -y was used without --allow-downgrades.\n"
    removed = [n for n in changing if n not in wanted]
    for n in removed:
        del pk[n]
        if n in state.get("holds", []):
            state["holds"].remove(n)
    new = [n for n in wanted if n not in pk]
    pk.update(wanted)
    if target and target != state["original_driver"] and "driver_params_lost" in state["faults"]:
        # the reinstall purged the package that carried the node's nvidia module options
        state.get("modprobe_d", {}).pop("/etc/modprobe.d/nvidia-k3.conf", None)
    out: list[str] = [head.rstrip("\n")] if tool == "apt" else [head.rstrip("\n"), "Dependencies resolved."]
    if removed:
        out += ["The following packages will be REMOVED:", "  " + " ".join(removed)]
    if new:
        out += ["The following NEW packages will be installed:", "  " + " ".join(new)]
    out.append(f"0 upgraded, {len(new)} newly installed, {len(removed)} to remove and 12 not upgraded.")
    if not target:
        return 0, "\n".join(out) + "\n", ""
    precompiled = next((n for n in pk if n.startswith(f"linux-modules-nvidia-{branch}-server-open-{kernel}")), None)
    if precompiled and not df.uses_dkms(src):
        carried = repos.precompiled_driver(state, branch)
        out += [f"Setting up {precompiled} ({pk[precompiled]}) ...",
                f"linux-restricted-modules: nvidia {carried} signed by Canonical Ltd. Kernel Module Signing"]
        state["module_version"], state["module_signed"] = carried, True
        state["half_configured"] = []
        if tool == "dnf":
            out.append("Complete!")
        return 0, "\n".join(out) + "\n", ""
    if not any("dkms" in n for n in pk):
        # neither Canonical's precompiled module for this branch nor a DKMS package: the
        # user space is installed, no kernel module is (modinfo: not found)
        state["module_version"], state["half_configured"] = None, []
        if tool == "dnf":
            out.append("Complete!")
        return 0, "\n".join(out) + "\n", ""
    dkms = next((n for n in wanted if "dkms" in n), next(iter(drivers), next(iter(wanted))))
    out += [f"Setting up {dkms} ({wanted[dkms]}) ...", f"Loading new nvidia-{target} DKMS files...",
            f"Building for {kernel}", "Building for architecture x86_64", f"Building initial module for {kernel}"]
    no_headers = not any(n in pk for n in df.header_packages(src, kernel))
    if ("driver_install_fails" in state["faults"] and target != state["original_driver"]) or no_headers:
        state["module_version"] = None
        state.setdefault("half_configured", []).append(dkms)
        if no_headers:
            out += [f"Error! Your kernel headers for kernel {kernel} cannot be found at /lib/modules/{kernel}/build "
                    f"or /lib/modules/{kernel}/source.",
                    "Please install the linux-headers-" + kernel + " package or use the --kernelsourcedir option to "
                    "tell DKMS where it's located."]
        else:
            out += ["ERROR: Cannot create report: [Errno 17] File exists: "
                    f"'/var/crash/{dkms}.0.crash'",
                    f"Error! Bad return status for module build on kernel: {kernel} (x86_64)",
                    f"Consult /var/lib/dkms/nvidia/{target}/build/make.log for more information."]
        err = [f"dpkg: error processing package {dkms} (--configure):",
               f" installed {dkms} package post-installation script subprocess returned error exit status 10",
               "Errors were encountered while processing:", f" {dkms}",
               "E: Sub-process /usr/bin/dpkg returned an error code (1)"] if tool == "apt" else \
            ["Error: Transaction failed: scriptlet failed in kmod-nvidia-open-dkms"]
        return (100 if tool == "apt" else 1), "\n".join(out) + "\n", "\n".join(err) + "\n"
    state["module_version"] = target
    # DKMS signs with the node's MOK key; the kernel accepts it only once the key is enrolled
    state["module_signed"] = bool(state.get("mok_enrolled"))
    state["half_configured"] = []
    out += ["Done.", "", "nvidia.ko:", "Running module version sanity check.", " - Original module",
            "   - No original module exists within this kernel", " - Installation",
            f"   - Installing to /lib/modules/{kernel}/updates/dkms/", "depmod....", ""]
    if tool == "dnf":
        out += ["Complete!"]
    return 0, "\n".join(out) + "\n", ""


def _older(a: str, b: str) -> bool:
    return repos.version_key(df.upstream(a)) < repos.version_key(df.upstream(b))


def apt_get(state: dict[str, Any], args: list[str]) -> Out:
    # options may come before the operation; -o/-c take a value
    opts: list[str] = []
    while args and args[0].startswith("-"):
        opts.append(args.pop(0))
        if opts[-1] in ("-o", "--option", "-c", "--config-file") and args:
            opts.append(args.pop(0))
    args = [*args[:1], *opts, *args[1:]]
    if not args:
        return 100, "", "E: Invalid operation\n"
    if args[0] == "clean":
        return cache.apt_clean(state)
    if args[0] == "update":
        c = repos.codename(state)
        return 0, (f"Hit:1 http://archive.ubuntu.com/ubuntu {c} InRelease\n"
                   f"Hit:2 http://archive.ubuntu.com/ubuntu {c}-updates InRelease\n"
                   f"Hit:3 http://security.ubuntu.com/ubuntu {c}-security InRelease\nReading package lists...\n"), ""
    if args[0] != "install":
        return 100, "", f"E: Invalid operation {args[0]}\n"
    wanted: dict[str, str] = {}
    skip = False
    for a in args[1:]:
        if skip or a.startswith("-"):
            skip = a in ("-o", "--option", "-c", "--config-file")
            continue
        if "=" not in a:
            return 100, "", f"E: k3rollout sim: pin every driver package to a version (name=version), got {a}\n"
        n, v = a.split("=", 1)
        wanted[n] = v
    if not wanted:
        return 0, "0 upgraded, 0 newly installed, 0 to remove and 12 not upgraded.\n", ""
    if "--download-only" in args or "-d" in args:
        return cache.apt_download(state, wanted)
    return _install(state, wanted, "apt", args)


def dnf(state: dict[str, Any], args: list[str]) -> Out:
    ops = [a for a in args if not a.startswith("-")]
    op = ops[0] if ops else ""
    if op == "list":
        return repos.dnf_list(state, args[args.index("list") + 1:])
    if op == "repoquery":
        return repos.dnf_repoquery(state, args[args.index("repoquery") + 1:])
    if op == "module":
        return repos.dnf_module(state, args[args.index("module") + 1:])
    if op == "versionlock":
        return repos.dnf_versionlock(state, args[args.index("versionlock") + 1:])
    if op not in ("install", "downgrade"):
        return 1, "", "Error: k3rollout sim supports dnf install/downgrade/list/repoquery/module only\n"
    wanted: dict[str, str] = {}
    known = sorted(repos.offers(state), key=len, reverse=True)
    for a in args[args.index(op) + 1:]:
        if a.startswith("-"):
            continue
        for n in known:
            if a.startswith(n + "-") and re.match(r"^(\d+:)?\d", a[len(n) + 1:]):
                wanted[n] = a[len(n) + 1:]
                break
        else:
            return 1, "", f"No match for argument: {a}\nError: Unable to find a match: {a}\n"
    return _install(state, wanted, "dnf", args)


def dpkg_query(state: dict[str, Any], args: list[str]) -> Out:
    fmt = "${Package}\t${Version}\n"
    pats: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("-f=") or a.startswith("--showformat="):
            fmt = a.split("=", 1)[1]
        elif a in ("-f", "--showformat"):
            i += 1
            fmt = args[i]
        elif not a.startswith("-"):
            pats.append(a)
        i += 1
    import fnmatch

    fmt = fmt.replace("\\n", "\n").replace("\\t", "\t")
    out = []
    half = set(state.get("half_configured", []))
    for name in sorted(state["packages"]):
        if pats and not any(fnmatch.fnmatchcase(name, p) for p in pats):
            continue
        ver = state["packages"][name]
        out.append(fmt.replace("${Package}", name).replace("${Version}", ver)
                   .replace("${db:Status-Abbrev}", "iF " if name in half else "ii ")
                   .replace("${Status}", "install ok half-configured" if name in half else "install ok installed"))
    if not out:
        return 1, "", f"dpkg-query: no packages found matching {' '.join(pats)}\n"
    return 0, "".join(out), ""


def rpm(state: dict[str, Any], args: list[str]) -> Out:
    import fnmatch

    pats = [a for a in args if not a.startswith("-") and "%" not in a]
    out = []
    for name in sorted(state["packages"]):
        if pats and not any(fnmatch.fnmatchcase(name, p) for p in pats):
            continue
        out.append(f"{name}\t{state['packages'][name]}\n")
    return 0, "".join(out), ""


def modinfo(state: dict[str, Any], args: list[str]) -> Out:
    if args[-1:] != ["nvidia"]:
        return 1, "", f"modinfo: ERROR: Module {args[-1] if args else ''} not found.\n"
    if not state["module_version"]:
        return 1, "", "modinfo: ERROR: Module nvidia not found.\n"
    if "-F" in args and args[args.index("-F") + 1] == "version":
        return 0, state["module_version"] + "\n", ""
    signer = ("Canonical Ltd. Kernel Module Signing" if not df.uses_dkms(state["driver_source"])
              else f"{state['name']} Secure Boot Module Signature key") if state.get("module_signed") else ""
    if "-F" in args and args[args.index("-F") + 1] == "signer":
        return 0, signer + "\n", ""
    return 0, f"filename:       /lib/modules/{state['kernel']}/updates/dkms/nvidia.ko.zst\n" \
              f"version:        {state['module_version']}\nlicense:        Dual MIT/GPL\n", ""


def dkms(state: dict[str, Any], args: list[str]) -> Out:
    if args[:1] != ["status"]:
        return 1, "", "Error! k3rollout sim supports 'dkms status' only\n"
    if state["module_version"]:
        return 0, f"nvidia/{state['module_version']}, {state['kernel']}, x86_64: installed\n", ""
    vers = {v.split("-")[0] for v in state["packages"].values()}
    return 0, "".join(f"nvidia/{v}: added\n" for v in sorted(vers)), ""


def reboot(state: dict[str, Any], on_boot: Callable[[dict[str, Any]], None] | None = None) -> Out:
    """The node reboots; ``on_boot``: what the node's services do as it comes up again (the
    Docker daemon's restarts, docker.on_boot: handed in by dispatch, which knows both, so this
    module does not import the container runtime that imports it)."""
    now = time.time()
    slow = "slow_reboot" in state["faults"]
    state["down_until"] = now + (state["slow_reboot_s"] if slow else state["reboot_s"])
    state["boots"] += 1
    state["boot_id"] = str(uuid.uuid4())
    # an unsigned module is refused under Secure Boot ("Key was rejected by service")
    unsigned = state.get("secure_boot") and not state.get("module_signed", True)
    state["loaded_driver"] = None if unsigned else state["module_version"]
    state["servers"] = {}
    # /run (and /var/lock, its link) is a tmpfs: emptied by the reboot; /var/tmp is kept
    if state.get("files"):
        state["files"] = {p: v for p, v in state["files"].items() if not p.startswith(("/run/", "/var/lock/"))}
    repos.on_boot(state)
    if "no_boot_after_upgrade" in state["faults"] and state["module_version"] != state["original_driver"]:
        # The host hangs in early boot with the new module (the classic "black screen
        # after driver upgrade"): it never answers SSH again without hands on the BMC.
        state["dead"] = True
    if on_boot is not None:
        on_boot(state)
    return 0, "", ""


def systemctl(state: dict[str, Any], args: list[str], on_boot: Callable[[dict[str, Any]], None] | None = None) -> Out:
    if args[:1] == ["reboot"]:
        return reboot(state, on_boot)
    handled = repos.systemctl(state, args)
    if handled is not None:
        return handled
    if args[:1] == ["is-active"] and len(args) > 1:
        unit = args[1]
        if unit in ("docker", "docker.service"):
            return 0, "active\n", ""
        return 3, "inactive\n", ""
    if args[:1] in (["restart"], ["start"], ["stop"]):
        return 0, "", ""
    return 1, "", f"Unknown command verb {args[0] if args else ''}.\n"


def date(args: list[str]) -> Out:
    now = datetime.now(timezone.utc)
    fmt = next((a[1:] for a in args if a.startswith("+")), None)
    if fmt:
        return 0, now.strftime(fmt) + "\n", ""
    return 0, now.strftime("%a %b %d %H:%M:%S UTC %Y") + "\n", ""
