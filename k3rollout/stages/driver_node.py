"""Read a node's driver situation: what its repositories offer, what it holds, Secure Boot,
NVSwitch, the GPU services. Shared by the driver stage (through ``ctx.step``, journaled,
output as evidence) and by ``k3rollout preflight`` (read-only, through the executor):
both pass a ``run(name, argv) -> CommandResult``.

Versions are never spelled here: they are resolved from ``apt-cache madison`` /
``dnf list --showduplicates`` (``dnf repoquery --disable-modular-filtering`` where the
target's module stream is not enabled yet, as in preflight), per the facts in
``checks/driver_facts.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from k3rollout.checks import driver_facts as df
from k3rollout.checks import parsers
from k3rollout.transport.base import CommandResult

Run = Callable[[str, list[str]], CommandResult]

_NEVRA = re.compile(r"^(?P<name>.+)-(?P<epoch>\d+):(?P<ver>[^-]+)-(?P<rel>.+)\.(?P<arch>x86_64|aarch64|noarch|i686)$")


def parse_repoquery(text: str) -> dict[str, list[dict[str, Any]]]:
    """``dnf repoquery`` default output: one ``name-epoch:version-release.arch`` per line."""
    out: dict[str, list[dict[str, Any]]] = {}
    for line in text.splitlines():
        m = _NEVRA.match(line.strip())
        if not m:
            continue
        evr = f"{m['epoch']}:{m['ver']}-{m['rel']}" if m["epoch"] != "0" else f"{m['ver']}-{m['rel']}"
        out.setdefault(m["name"], []).append({"evr": evr, "version": f"{m['ver']}-{m['rel']}", "installed": False})
    return out


def offers(run: Run, source: str, names: list[str], name: str = "repo-offers",
           all_streams: bool = False) -> dict[str, list[dict[str, Any]]]:
    """What the node's repositories offer for ``names`` (installed-only rows dropped)."""
    if not names:
        return {}
    if df.pkg_mgr(source) == "apt":
        res = run(name, parsers.apt_madison_argv(names))
        return parsers.parse_apt_madison(res.stdout)
    if all_streams:
        res = run(name, ["dnf", "-q", "repoquery", "--disable-modular-filtering", "--showduplicates", *names])
        return parse_repoquery(res.stdout)
    res = run(name, ["dnf", "list", "--showduplicates", *names])
    got = parsers.parse_dnf_list(res.stdout) if res.ok else {}
    return {n: [o for o in rows if not o["installed"]] for n, rows in got.items()}


def read_os(run: Run) -> dict[str, Any]:
    osr = run("os-release", ["cat", "/etc/os-release"])
    family = "RedHat" if any(x in osr.stdout for x in ('ID="rocky"', 'ID="rhel"', "ID=rhel", 'ID="almalinux"')) \
        else "Debian"
    return {"os_family": family, "pkg_mgr": "dnf" if family == "RedHat" else "apt",
            "kernel": run("kernel", ["uname", "-r"]).stdout.strip()}


def secure_boot(run: Run) -> dict[str, Any]:
    sb = run("secure-boot", ["mokutil", "--sb-state"])
    state = parsers.parse_mokutil_sb_state(sb.stdout + sb.stderr) if sb.rc in (0, 1) else None
    out: dict[str, Any] = {"secure_boot": state}
    if state:
        key = run("mok-key", ["mokutil", "--test-key", df.MOK_KEY])
        out["mok_enrolled"] = "is already enrolled" in key.stdout
    return out


def nvswitch(run: Run) -> bool:
    res = run("nvswitch", df.NVSWITCH_PROBE)
    return res.ok and bool(res.stdout.strip())


def holds(run: Run, mgr: str, name: str | None = None) -> list[str]:
    """Names of the held (apt-mark) or version-locked (dnf versionlock) packages the driver
    change replaces (a held container toolkit is not the driver's: left as it is). Both are
    released and put back by name (``apt-mark unhold|hold NAME``, ``dnf versionlock
    delete|add NAME``: the plugin matches an entry by its name and locks the installed
    version)."""
    if mgr == "apt":
        res = run(name or "held-packages", ["apt-mark", "showhold"])
        return [h for h in parsers.parse_apt_showhold(res.stdout) if df.changes_with_driver(h)] if res.ok else []
    res = run(name or "version-locks", ["dnf", "versionlock", "list"])
    if not res.ok:
        return []                      # no versionlock plugin: nothing can be locked
    return sorted({e["name"] for e in parsers.parse_versionlock_list(res.stdout)
                   if not e["exclude"] and df.changes_with_driver(e["name"])})


def active_services(run: Run) -> list[str]:
    out = []
    for unit in df.GPU_SERVICES:
        res = run(f"service-{unit}", ["systemctl", "is-active", unit])
        if res.stdout.strip() == "active":
            out.append(unit)
    return out


def module_stream(run: Run) -> str | None:
    res = run("module-stream", ["dnf", "module", "list", "--enabled", df.DNF_MODULE])
    return parsers.enabled_stream(parsers.parse_dnf_module_list(res.stdout)) if res.ok else None


def module_step_probe(argv: list[str]) -> Callable[[Any, dict[str, Any]], bool] | None:
    """For ``dnf module reset|enable|switch-to nvidia-driver[:STREAM]``: a probe that tells,
    from the stream enabled now, whether the command took effect (reset: none enabled;
    enable / switch-to: that stream), so an interrupted one is settled on resume, never
    guessed. None for any other command."""
    if argv[:1] != ["dnf"] or "module" not in argv:
        return None
    rest = [a for a in argv[argv.index("module") + 1:] if not a.startswith("-")]
    op, target = (rest + ["", ""])[:2]
    if target.partition(":")[0] != df.DNF_MODULE:
        return None
    if op == "reset":
        want = None
    elif op in ("enable", "switch-to"):
        want = target.partition(":")[2].split("/")[0] or None
    else:
        return None

    def probe(ctx: Any, meta: dict[str, Any]) -> bool:
        return module_stream(lambda name, a: ctx.step(name, a)) == want
    return probe


def resolve_target(run: Run, source: str, target: str, kernel: str, fabric: bool, *,
                   all_streams: bool = False, name: str = "target-offers") -> dict[str, Any]:
    """The install for ``target`` on this node: exact versions its repositories offer.
    ``install``: the pinned arguments (kernel headers first on DKMS paths)."""
    branch = target.split(".")[0]
    names = df.target_names(source, branch, kernel, fabric)
    headers = df.header_packages(source, kernel) if df.uses_dkms(source) else []
    got = offers(run, source, names + headers, name=name, all_streams=all_streams)
    pins, missing = df.resolve(names + headers, target, got)
    mgr = df.pkg_mgr(source)
    return {"source": source, "target": target, "names": names, "headers": headers, "pins": pins,
            "missing": missing, "install": [df.pin(mgr, n, pins[n]) for n in headers + names if n in pins],
            "module_stream": f"{df.DNF_MODULE}:{df.module_stream(branch)}"}


def baseline_downloadable(run: Run, source: str, packages: list[dict[str, str]],
                          name: str = "baseline-offers") -> tuple[list[str], dict[str, str | None]]:
    """Which of the installed driver packages the repositories no longer offer at exactly
    that version (then a rollback cannot reinstall them), and where each came from."""
    names = [p["name"] for p in packages]
    got = offers(run, source, names, name=name, all_streams=True)
    gone = [f"{p['name']}={p['version']}" for p in packages if not df.offered(p["name"], p["version"], got)]
    origins = {}
    for p in packages:
        src = next((o.get("source") or o.get("repo") for o in got.get(p["name"], [])
                    if (o.get("evr") or o["version"]).split(":")[-1] == p["version"].split(":")[-1]), None)
        origins[p["name"]] = src
    return gone, origins


def origins(run: Run, mgr: str, names: list[str]) -> dict[str, str | None]:
    """The repository each installed package came from (None: no repository offers that
    version any more). apt: ``apt-cache policy``; dnf: ``dnf list --installed`` (``@repo``)."""
    if not names:
        return {}
    if mgr == "apt":
        res = run("package-origins", ["apt-cache", "policy", *names])
        pol = parsers.parse_apt_policy(res.stdout)
        return {n: (pol.get(n) or {}).get("origin") for n in names}
    res = run("package-origins", ["dnf", "list", "--installed", *names])
    got = parsers.parse_dnf_list(res.stdout) if res.ok else {}
    return {n: next((o["repo"] for o in got.get(n, []) if o["installed"]), None) for n in names}


def driver_rollback_facts(ctx: Any, f: dict[str, Any]) -> dict[str, Any]:
    """Baseline facts a driver rollback needs, beyond the package list: where each package
    came from, holds / version locks, the enabled DNF module stream, the module options in
    /etc/modprobe.d (and the files that set the nvidia module's, whole), Secure Boot, and
    whether this is an NVSwitch system."""
    def run(name: str, argv: list[str]) -> CommandResult:
        got: CommandResult = ctx.step(name, argv)
        return got

    out: dict[str, Any] = {}
    mgr = f.get("pkg_mgr", "apt")
    try:
        out["driver_source"] = df.source_of(ctx.vars, f.get("os_family", "Debian"))
    except ValueError:
        out["driver_source"] = None
    pk = f.get("driver_packages", [])
    if mgr == "apt":
        # Canonical's signed precompiled modules (linux-modules-nvidia-575-server-open-$(uname -r))
        # are not nvidia-*: without them a rollback on that path restores no kernel module
        mods = run("precompiled-modules", parsers.DPKG_MODULES_ARGV)
        pk.extend(p for p in parsers.parse_packages(mods.stdout) if p["status"].startswith("ii"))
    org = origins(run, mgr, [p["name"] for p in pk])
    for p in pk:
        p["origin"] = org.get(p["name"])
    out["held_packages"] = holds(run, mgr)
    if mgr == "dnf":
        out["driver_module_stream"] = module_stream(run)
    conf = run("modprobe-d", ["grep", "-rH", ".", "/etc/modprobe.d"])
    out["modprobe_d"] = parsers.parse_modprobe_d(conf.stdout)
    # the files that set the nvidia module's options, whole: the rollback writes back any
    # that the change dropped or altered (a reinstall can purge them)
    out["nvidia_options_files"] = parsers.nvidia_options_files(conf.stdout)
    out.update(secure_boot(run))
    out["nvswitch"] = nvswitch(run)
    return out
