"""The host backend (``k3_driver_backend: host``, the default): the driver as packages on the node.

The upgrade runs the operator's vendor steps from the playbook (``with.install.apt`` /
``.dnf``), rendered with vars; k3rollout does not invent OS commands (docs/domain.md). Both
the install and the reboot are ``once`` steps: after a crash they are settled by probes
(packages at target; boot id changed), never blindly repeated. Verification after the
reboot: nvidia-smi reports the target, the loaded kernel module matches, DKMS built it.

Around the vendor steps (``stages/driver_procedure.py``, the same for the inline and the
Ansible path): stop and disable what holds the GPU, release and record holds, refuse an
unsigned DKMS module under Secure Boot, resolve exact versions from the node's
repositories (the template variable ``driver``), check the built module before the
reboot, and after it the module parameters and the fabric manager (enabled, active, on
exactly the driver's version), then restart what was stopped.

The restore reinstalls the exact packages baseline recorded with the playbook's
``restore`` steps, holds again what was held, writes back the nvidia module options files
a reinstall dropped, reboots and checks the driver. Pre-staging downloads the exact install
into apt's cache while the node still serves (``check_staged`` reads it back in the
window); the preflight checks that the target and the installed versions are both offered.

``HostPackages`` is this backend behind the ``DriverBackend`` protocol (stages/driver/base.py).
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from k3rollout.checks import driver_facts as df
from k3rollout.checks import parsers
from k3rollout.errors import StepFailed
from k3rollout.model.assertions import AssertionSyntaxError, render_argv
from k3rollout.model.assertions import template_context as shared_template_context
from k3rollout.stages import driver_node as dn
from k3rollout.stages import driver_procedure as procedure
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.driver import gpu_operator
from k3rollout.stages.driver.base import Check, RestoreParams, Run

ARCHIVES = "/var/cache/apt/archives"
LIST_ARGV = ["find", ARCHIVES, "-maxdepth", "1", "-name", "*.deb", "-printf", "%s %f\\n"]


def deb_file(name: str, version: str) -> str:
    """apt's file name in its cache for a package version (``:`` as ``%3a``), arch-less prefix."""
    return f"{name}_{version.replace(':', '%3a')}_"


def parse_listing(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        size, _, name = line.strip().partition(" ")
        if name and size.isdigit():
            out[name] = int(size)
    return out


# a step that names the resolved install (`{{ driver.install }}`)
_USES_DRIVER = re.compile(r"\{\{[^}]*\bdriver\.")


def template_context(ctx: NodeCtx) -> dict[str, Any]:
    return shared_template_context(ctx.vars, node=ctx.node, facts=ctx.facts, baseline=ctx.baseline)


def pinned(argv: list[str]) -> dict[str, str]:
    """``name=version`` (apt) or ``name-version`` (dnf) arguments of an install command."""
    out = {}
    rpm_style = bool(argv) and argv[0] in ("dnf", "yum")
    for a in argv[1:]:
        if a.startswith("-"):
            continue
        if "=" in a:
            n, v = a.split("=", 1)
            out[n] = v
        elif rpm_style:
            m = re.match(r"^(.+?)-(?:\d+:)?(\d[\w.~+]*-[\w.~+]+)$", a)
            if m:
                out[m.group(1)] = m.group(2)
    return out


def packages_at(ctx: NodeCtx, wanted: dict[str, str]) -> bool:
    have = {p["name"]: p["version"] for p in ctx.read_packages() if p["status"].startswith("ii")}
    # kernel headers and module shells are not NVIDIA packages the package query lists
    wanted = {n: v for n, v in wanted.items() if not n.startswith(("linux-", "kernel-"))}
    return bool(wanted) and all(have.get(n) == v.split(":", 1)[-1] for n, v in wanted.items())


def wait_for_new_boot(ctx: NodeCtx, before: str, timeout: float,
                      same_id_grace: float | None = None) -> tuple[bool, str, float]:
    """Poll until the host answers with a boot id other than ``before``.

    Right after ``reboot`` a host may still answer for a moment with its old boot id, or
    drop a connection mid-command: both mean "not yet", until the timeout. With
    ``same_id_grace``, a host that keeps answering with the old id for that long did not
    reboot (used to settle an interrupted reboot step without rebooting twice).
    """
    started = time.monotonic()
    last = "no answer"
    old_since: float | None = None
    while True:
        left = timeout - (time.monotonic() - started)
        if left <= 0:
            return False, f"did not come back within {timeout:.0f}s after reboot ({last})", timeout
        try:
            ctx.runner.wait_for_host(ctx, left)
            now = ctx.read_boot_id()
        except StepFailed as exc:
            last = str(exc).splitlines()[0]
            # a transport whose wait fails at once (refused while the host boots) must not
            # spin: pause as after an old boot id
            time.sleep(min(0.2, max(0.0, timeout - (time.monotonic() - started))))
            continue
        if now and now != before:
            return True, "", time.monotonic() - started
        last = "host answered with its old boot id"
        old_since = old_since or time.monotonic()
        if same_id_grace is not None and time.monotonic() - old_since >= same_id_grace:
            return False, "the host did not reboot", time.monotonic() - started
        time.sleep(min(0.2, max(0.0, left)))


def reboot_and_wait(ctx: NodeCtx, name: str, timeout: float, grace: float = 10.0) -> tuple[bool, str, float]:
    """Reboot once, wait for the host, prove it rebooted (the boot id changed).

    The boot id before the reboot is journaled with the step, so after a crash the probe
    compares against the id the host had when *this* reboot was issued.
    """
    prior = ctx.runner.prior_meta(ctx, name)
    before = prior["boot_id_before"] if prior and "boot_id_before" in prior else ctx.read_boot_id()

    def rebooted(c: NodeCtx, meta: dict[str, Any]) -> bool:
        return wait_for_new_boot(c, meta.get("boot_id_before", before), timeout,
                                 same_id_grace=min(timeout, grace))[0]

    ctx.step(name, ["reboot"], once=True, probe=rebooted, meta={"boot_id_before": before}, timeout=timeout)
    return wait_for_new_boot(ctx, before, timeout)


def verify_driver(ctx: NodeCtx, expected: str) -> tuple[bool, str, dict[str, Any]]:
    f: dict[str, Any] = {}
    gpu = ctx.read_gpu()
    f.update(gpu)
    proc = ctx.step("proc-driver-version", ["cat", "/proc/driver/nvidia/version"])
    f["module_version"] = parsers.parse_proc_version(proc.stdout) if proc.ok else None
    ctx.step("dkms-status", ["dkms", "status"])
    params = ctx.step("nvidia-params", ["cat", "/proc/driver/nvidia/params"])
    f["nvidia_params"] = parsers.parse_nvidia_params(params.stdout) if params.ok else {}
    fm = ctx.step("fabricmanager", ["systemctl", "is-active", "nvidia-fabricmanager"])
    f["fabricmanager"] = fm.stdout.strip() or "unknown"
    f["driver_packages"] = [p for p in ctx.read_packages() if p["status"].startswith("ii")]
    if gpu.get("driver_version") != expected:
        why = gpu.get("gpu_error") or f"nvidia-smi reports {gpu.get('driver_version')}"
        return False, f"driver is not {expected} after reboot: {why}", f
    if f["module_version"] != expected:
        return False, f"loaded kernel module is {f['module_version']}, expected {expected}", f
    return True, "", f


def upgrade(ctx: NodeCtx) -> StageOutcome:
    """The vendor steps on the node, the reboot, the checks (the module docstring)."""
    p = ctx.params
    target = p.target_driver
    if ctx.facts.get("driver_version") == target and ctx.facts.get("module_version") == target:
        return StageOutcome(True, f"already at {target}: nothing to install", {"driver_upgrade": "already-at-target"})
    mgr = ctx.facts.get("pkg_mgr") or ctx.baseline.get("pkg_mgr", "apt")
    resumed_in_reboot = ctx.runner.prior_meta(ctx, "reboot") is not None
    if resumed_in_reboot:
        # resumed after the reboot was issued: the host may still be rebooting. Wait for it
        # as the first run would have, before the procedure reads anything from it (its
        # steps before the reboot are replayed from the journal, never sent again)
        try:
            ctx.runner.wait_for_host(ctx, p.reboot_timeout)
        except StepFailed as exc:
            return StageOutcome(False, f"reboot: {exc}", {}, str(exc))
    proc = procedure.Procedure(ctx, target, mgr)
    ok, why = proc.prepare()
    if not ok:
        return proc.fail(why)
    if not resumed_in_reboot:
        # what pre-staging fetched before the window: still in the cache as it was staged?
        staged = check_staged(ctx)
        if staged is not None:
            proc.facts.update(staged)
    tasks = getattr(p.tasks, mgr)
    if tasks and ctx.runner.can_run_ansible:
        return proc.finish(run_ansible(ctx, Path(ctx.vars["playbook_dir"]) / tasks, proc))
    steps = getattr(p.install, mgr)
    if not steps:
        return proc.fail(f"the playbook has no `with.install.{mgr}` vendor steps for this node's package manager")
    tctx = template_context(ctx)
    logs: list[str] = []
    if resumed_in_reboot:
        # every vendor step before the reboot had succeeded: none is sent again
        steps = []
    for i, tmpl in enumerate(steps, start=1):
        if _USES_DRIVER.search(str(tmpl)) and "driver" not in tctx:
            # resolved only now: on RHEL the steps before enable the target's module stream
            resolved = proc.resolve()
            if resolved["missing"]:
                return proc.fail(f"the node's repositories do not offer {target} for: "
                                 f"{', '.join(resolved['missing'])}", "\n".join(logs))
            tctx["driver"] = resolved
        argv = render_argv(tmpl, tctx)
        wanted = pinned(argv)
        res = ctx.step(f"vendor-step-{i}", argv, once=bool(wanted),
                       probe=(lambda c, m, w=wanted: packages_at(c, w)) if wanted else None, timeout=3600)
        logs.append(res.stdout + res.stderr)
        if not res.ok:
            return proc.fail(f"vendor step {i} failed (rc {res.rc}): {res.command}", "\n".join(logs),
                             {"driver_packages": ctx.read_packages()})
    ok, why = proc.check_built()
    if not ok:
        return proc.fail(why, "\n".join(logs))
    ok, why, waited = reboot_and_wait(ctx, "reboot", p.reboot_timeout, p.reboot_grace)
    if not ok:
        return proc.fail(f"reboot: {why}", "\n".join(logs) + "\n" + why, {"reboot_wait_s": waited})
    ok, why, facts = verify_driver(ctx, target)
    facts["reboot_wait_s"] = round(waited, 3)
    return proc.finish(StageOutcome(ok, why, facts, "" if ok else "\n".join(logs) + "\n" + why + "\n"
                                    + str(facts.get("gpu_error", ""))))


def run_ansible(ctx: NodeCtx, tasks_file: Path, proc: procedure.Procedure) -> StageOutcome:
    """The vendor steps as a real Ansible task file (update, headers, resolution of exact
    versions on the node, install, module check, reboot module, wait)."""
    p = ctx.params
    target = p.target_driver

    def upgraded(c: NodeCtx, meta: dict[str, Any]) -> bool:
        try:
            c.runner.wait_for_host(c, p.reboot_timeout)
        except StepFailed:
            return False
        return verify_driver(c, target)[0]

    res = ctx.runner.ansible_step(ctx, "vendor-tasks", tasks_file, {
        "k3_target_driver": target, "k3_target_branch": str(p.target_branch),
        "k3_reboot_timeout": int(p.reboot_timeout), **proc.ansible_vars()},
        probe=upgraded, timeout=p.reboot_timeout + 3600)
    if not res.ok:
        facts = {}
        try:
            facts["driver_packages"] = ctx.read_packages()
        except StepFailed:
            pass   # the host may be down: the reason below already says why
        return StageOutcome(False, f"vendor tasks {tasks_file.name} failed (rc {res.rc}): {res.stderr[-300:]}",
                            facts, res.stdout[-4000:] + "\n" + res.stderr)
    try:
        ctx.runner.wait_for_host(ctx, p.reboot_timeout)
    except StepFailed as exc:
        return StageOutcome(False, f"reboot: {exc}", {}, str(exc))
    ok, why, facts = verify_driver(ctx, target)
    return StageOutcome(ok, why, facts, "" if ok else res.stdout[-4000:] + "\n" + why)


def _restore_packages(ctx: NodeCtx, step: dict[str, Any]) -> tuple[bool, str]:
    if step.get("error"):
        return False, step["error"]
    want = step.get("to_version")
    gpu = ctx.read_gpu()
    mgr = ctx.baseline.get("pkg_mgr", "apt")
    if gpu.get("driver_version") == want:
        wanted = {p["name"]: p["version"] for p in step.get("packages", [])}
        if not wanted or packages_at(ctx, wanted):
            ok, why = _hold_again(ctx, step, mgr)
            if not ok:
                return ok, why
            ok, why, restored = _restore_module_options(ctx, step)
            if not ok:
                return ok, why
            if not restored:
                # no reboot: what the driver stage stopped (and on failure only re-enabled,
                # for a restore's reboot to start) is started here
                ok, started = _start_stopped(ctx)
                if not ok:
                    return ok, started
                return True, f"driver already at {want}: nothing to restore" + (f"; {started}" if started else "")
            if step.get("reboot", True):
                # the loaded module read its options before they were written back: it
                # takes them at its next load
                ok, why = _restore_reboot(ctx, step)
                if not ok:
                    return False, f"reboot after restoring {', '.join(restored)}: {why}"
            return True, f"driver already at {want}; module options restored: {', '.join(restored)}"
    # a hold or version lock on what is installed now (the new driver's, put there by the
    # upgrade) would refuse the restore: released first, the baseline's put back after
    held = dn.holds(lambda name, argv: ctx.step(name, argv), mgr, name="rollback-holds")
    if held:
        argv = ["apt-mark", "unhold", *held] if mgr == "apt" else ["dnf", "versionlock", "delete", *held]
        res = ctx.step("rollback-release-holds", argv)
        if not res.ok:
            return False, f"could not release the holds on {', '.join(held)} (rc {res.rc}): {res.tail(300)}"
    for i, argv in enumerate(step["commands"], start=1):
        wanted = pinned(argv)
        # an interrupted step is settled by what it changes: the packages it pins, or the
        # DNF module stream it resets or enables
        probe = (lambda c, m, w=wanted: packages_at(c, w)) if wanted else dn.module_step_probe(argv)
        res = ctx.step(f"restore-step-{i}", argv, once=True, probe=probe, timeout=3600)
        if not res.ok:
            return False, f"restore step {i} failed (rc {res.rc}): {res.tail(300)}"
    ok, why = _hold_again(ctx, step, mgr)
    if not ok:
        return False, why
    # before the reboot: the restored module reads its options from /etc/modprobe.d as it loads
    ok, why, restored = _restore_module_options(ctx, step)
    if not ok:
        return False, why
    if step.get("reboot", True):
        ok, why = _restore_reboot(ctx, step)
        if not ok:
            return False, f"reboot after restore: {why}"
    gpu = ctx.read_gpu()
    if gpu.get("driver_version") != want:
        return False, f"after restore nvidia-smi reports {gpu.get('driver_version')} ({gpu.get('gpu_error', '')})"
    also = f"; module options restored: {', '.join(restored)}" if restored else ""
    return True, f"driver restored to {want}{also}"


def _restore_reboot(ctx: NodeCtx, step: dict[str, Any]) -> tuple[bool, str]:
    """The restore's reboot, with the recorded step's timeout and grace: (back, why not)."""
    ok, why, _ = reboot_and_wait(ctx, "restore-reboot", float(step.get("reboot_timeout", 900)),
                                 float(step.get("reboot_grace", 10)))
    return ok, why


def _options_file_lines(text: str) -> list[str]:
    # as the baseline's ``grep -rH .`` saw a file: its non-empty lines
    return [line for line in text.splitlines() if line]


def _read_options_file(ctx: NodeCtx, name: str, path: str) -> str | None:
    res = ctx.step(name, ["cat", path])
    return res.stdout if res.ok else None


def _restore_module_options(ctx: NodeCtx, step: dict[str, Any]) -> tuple[bool, str, list[str]]:
    """Write back each nvidia module options file the baseline recorded that is now missing
    or different (a reinstall can purge it), and keep what was found and written as
    evidence. Each write is a ``once`` step, settled after a crash by the file's content.
    Returns (ok, why not, the files written back)."""
    restored: list[str] = []
    report: list[str] = []
    for i, f in enumerate(step.get("module_options") or [], start=1):
        path, content = f["file"], f["content"]
        want = _options_file_lines(content)
        name = f"module-options-restore-{i}"
        found = _read_options_file(ctx, f"module-options-check-{i}", path)
        intact = found is not None and _options_file_lines(found) == want
        # started before a crash: replayed or settled by its probe below, never sent twice
        earlier = ctx.runner.prior_meta(ctx, name) is not None
        if intact and not earlier:
            continue

        def written(c: NodeCtx, meta: dict[str, Any], p: str = path, n: int = i, w: list[str] = want) -> bool:
            now = _read_options_file(c, f"module-options-probe-{n}", p)
            return now is not None and _options_file_lines(now) == w

        res = ctx.step(name, ["tee", path], stdin=content.encode(), once=True, probe=written, meta={"file": path})
        if not res.ok:
            return False, f"could not write back {path} (rc {res.rc}): {res.tail(300)}", restored
        after = _read_options_file(ctx, f"module-options-verify-{i}", path)
        if after is None or _options_file_lines(after) != want:
            return False, f"wrote back {path}, but it does not read as the baseline recorded it", restored
        restored.append(path)
        was = "written back before an interruption" if intact else "missing" if found is None else "changed"
        report.append(f"{path}: {was}; written back as the baseline recorded it\n"
                      f"--- found ---\n{found or ''}--- written ---\n{content}")
    if report:
        ctx.evidence("module-options-restored", "\n".join(report))
    return True, "", restored


def _as_it_was(ctx: NodeCtx, step: dict[str, Any], why: str) -> tuple[bool, str]:
    """The driver stage changed nothing (``why``): no restore and no reboot. It stopped the
    services that hold the GPU and released the holds before its install; on failure it only
    re-enabled the services, for a restore's reboot to start, and there is none here."""
    gpu = ctx.read_gpu()
    if gpu.get("driver_version") != step.get("to_version"):
        # the journal and the node disagree: restore as for any other failure
        return _restore_packages(ctx, step)
    mgr = ctx.baseline.get("pkg_mgr", "apt")
    ok, msg = _hold_again(ctx, step, mgr)
    if not ok:
        return ok, msg
    ok, started = _start_stopped(ctx)
    if not ok:
        return ok, started
    return True, (f"nothing to restore: {why}; the driver is still {step.get('to_version')}"
                  + (f"; {started}" if started else ""))


def _start_stopped(ctx: NodeCtx) -> tuple[bool, str]:
    """Start again the GPU services the driver stage stopped (its ``stopped_services``)."""
    stopped = [u for u in df.RESTART_ORDER if u in (ctx.facts.get("stopped_services") or [])]
    if not stopped:
        return True, ""
    res = ctx.step("rollback-start-gpu-services", ["systemctl", "enable", "--now", *stopped])
    if not res.ok:
        return False, f"could not start {', '.join(stopped)} again (rc {res.rc}): {res.tail(300)}"
    return True, f"started again: {', '.join(stopped)}"


def _hold_again(ctx: NodeCtx, step: dict[str, Any], mgr: str) -> tuple[bool, str]:
    """The baseline's holds / version locks, on the restored packages (idempotent: holding
    a held package again changes nothing)."""
    names = step.get("holds") or []
    if not names:
        return True, ""
    argv = ["apt-mark", "hold", *names] if mgr == "apt" else ["dnf", "versionlock", "add", *names]
    res = ctx.step("rollback-hold-again", argv)
    if not res.ok:
        return False, f"restored, but could not hold {', '.join(names)} again (rc {res.rc}): {res.tail(300)}"
    return True, ""


class HostPackages:
    """The driver as packages on the node."""

    kind = "host"
    uses_kubernetes_api = False

    def baseline_facts(self, ctx: NodeCtx, f: dict[str, Any]) -> None:
        f["driver_packages"] = [pk for pk in ctx.read_packages() if pk["status"].startswith("ii")]
        f.update(dn.driver_rollback_facts(ctx, f))

    def owner_facts(self, ctx: NodeCtx, f: dict[str, Any]) -> str | None:
        if f["driver_owner"] == "gpu-operator":
            return ("the NVIDIA GPU Operator manages this node's driver (its driver DaemonSet runs here): a host-level "
                    f"package upgrade is refused; {gpu_operator.how_to_use()}. Nothing was changed.")
        return None

    def upgrade(self, ctx: NodeCtx) -> StageOutcome:
        return upgrade(ctx)

    def restore_plan(self, step: dict[str, Any], node: str, baseline: dict[str, Any], tvars: dict[str, Any],
                     params: RestoreParams) -> None:
        mgr = baseline.get("pkg_mgr", "apt")
        tmpl = getattr(params.restore, mgr) if params.restore else []
        # planned right after baseline: the node's facts are its baseline
        tctx = shared_template_context(tvars, node=node, facts=baseline, baseline=baseline)
        try:
            cmds = [render_argv(t, tctx) for t in tmpl]
        except AssertionSyntaxError as exc:
            cmds = []
            step["error"] = str(exc)
        step.update({"to_version": baseline.get("driver_version"), "commands": cmds,
                     "reboot": params.reboot, "reboot_timeout": params.reboot_timeout,
                     "reboot_grace": params.reboot_grace,
                     "packages": baseline.get("driver_packages", [])})
        if baseline.get("held_packages"):
            # held / version-locked before the change: held again once restored
            step["holds"] = list(baseline["held_packages"])
        if baseline.get("nvidia_options_files"):
            # the files that set the nvidia module's options (a site's, e.g. DeepEP's): a
            # reinstall can drop them, and the restored module must load with them again
            step["module_options"] = [{"file": f["file"], "content": f["content"]}
                                      for f in baseline["nvidia_options_files"]]
        if not cmds:
            step.setdefault("error", f"no `restore.{mgr}` steps in the driver_upgrade stage")

    def describe_restore(self, step: dict[str, Any]) -> str:
        cmds = "; ".join(shlex.join(c) for c in step.get("commands", [])) or f"NONE ({step.get('error')})"
        if step.get("holds") and step.get("commands"):
            cmds += f"; hold again {', '.join(step['holds'])}"
        if step.get("module_options") and step.get("commands"):
            cmds += f"; write back {', '.join(f['file'] for f in step['module_options'])} as the baseline saw it"
        return (f"restore_driver to {step.get('to_version')}: {cmds}"
                + ("; reboot; verify nvidia-smi and kernel module report " + str(step.get("to_version"))
                   if step.get("reboot") else ""))

    def restore(self, ctx: NodeCtx, step: dict[str, Any], untouched: str | None) -> tuple[bool, str]:
        # the driver stage changed nothing: no restore and no reboot (``_as_it_was``)
        return _as_it_was(ctx, step, untouched) if untouched else _restore_packages(ctx, step)

    def preflight_owner(self, owned_by_operator: bool, hvars: dict[str, Any]) -> tuple[bool, str]:
        return not owned_by_operator, (
            "the GPU Operator's driver container owns this node's driver (/run/nvidia/driver): a host package "
            f"upgrade would fight it; {gpu_operator.how_to_use()}" if owned_by_operator else "host-installed driver")

    def preflight(self, run: Run, hvars: dict[str, Any], target: str, source: str, os_facts: dict[str, Any],
                  info: dict[str, Any], ansible: Callable[[], tuple[bool, str]] | None) -> Iterator[Check]:
        mgr = df.pkg_mgr(source)
        if ansible is not None:
            yield ("ansible", *ansible())
        fabric = dn.nvswitch(run)
        info["nvswitch"] = fabric
        want = dn.resolve_target(run, source, target, os_facts["kernel"], fabric, all_streams=True)
        info["target_install"] = want["install"]
        yield ("target_packages", not want["missing"],
               f"not offered for {target}: {', '.join(want['missing'])}" if want["missing"]
               else f"{len(want['pins'])} packages offered for {target}")

        argv = parsers.RPM_ARGV if mgr == "dnf" else parsers.DPKG_ARGV
        pk = run("installed-packages", argv)
        installed = [p for p in parsers.parse_packages(pk.stdout) if p["status"].startswith("ii")]
        if mgr == "apt":
            # Canonical's precompiled module packages: the rollback restores them too
            mods = run("precompiled-modules", parsers.DPKG_MODULES_ARGV)
            installed += [p for p in parsers.parse_packages(mods.stdout) if p["status"].startswith("ii")]
        info["installed_driver_packages"] = installed
        gone, origins = dn.baseline_downloadable(run, source, installed)
        info["origins"] = origins
        yield ("rollback_packages", not gone,
               ("no longer downloadable, so this node's rollback is impossible: " + ", ".join(gone)) if gone
               else f"all {len(installed)} installed NVIDIA packages are still downloadable")

        if fabric:
            branch = (info.get("driver_version") or "").split(".")[0]
            fm_names = [p["name"] for p in installed if "fabric" in p["name"]]
            yield ("fabric_manager", bool(fm_names),
                   f"installed: {', '.join(fm_names)}" if fm_names else
                   f"NVSwitch system without a fabric manager package ({df.fabricmanager(source, branch or 580)}): "
                   "CUDA fails with error 802")

        sb = dn.secure_boot(run)
        info.update(sb)
        unsigned = bool(sb.get("secure_boot")) and df.uses_dkms(source) and not sb.get("mok_enrolled")
        yield ("secure_boot", not unsigned,
               "Secure Boot is on and the DKMS module would be signed with a MOK key that is not enrolled: it would "
               "not load. Enroll the key or use nvidia_driver_source: ubuntu-archive-precompiled" if unsigned else
               ("Secure Boot on, module signing in place" if sb.get("secure_boot") else "Secure Boot off"))

        info["held_packages"] = dn.holds(run, mgr)
        if mgr == "dnf":
            info["driver_module_stream"] = dn.module_stream(run)

    def prestage(self, step: Run, ctx: NodeCtx, os_facts: dict[str, Any], facts: dict[str, Any]
                 ) -> StageOutcome | None:
        return prestage(step, ctx, os_facts, facts)


def prestage(step: Run, ctx: NodeCtx, osf: dict[str, Any], facts: dict[str, Any]) -> StageOutcome | None:
    """The exact install the driver stage will run, downloaded into apt's cache and listed;
    on RHEL the target's module stream is enabled only in the window, so nothing is fetched."""
    mgr = osf["pkg_mgr"]
    target = str(ctx.vars.get("target_driver") or "")
    if mgr == "apt" and target:
        try:
            source = df.source_of(ctx.vars, osf["os_family"])
        except ValueError as exc:
            return StageOutcome(False, str(exc), {"prestage": facts})
        upd = step("apt-update", ["apt-get", "update"])
        if not upd.ok:
            return StageOutcome(False, f"apt-get update failed (rc {upd.rc}): {upd.tail(300)}",
                                {"prestage": facts}, logs=upd.stderr)
        resolved = dn.resolve_target(step, source, target, osf["kernel"], dn.nvswitch(step), name="prestage-offers")
        if resolved["missing"]:
            return StageOutcome(False, f"the node's repositories do not offer {target} for: "
                                + ", ".join(resolved["missing"]), {"prestage": facts})
        res = step("download-driver", ["apt-get", "install", "--download-only", "-y", *resolved["install"]])
        if not res.ok:
            return StageOutcome(False, f"download of the driver packages failed (rc {res.rc}): {res.tail(300)}",
                                {"prestage": facts}, logs=res.stdout + res.stderr)
        listing = parse_listing(step("staged-packages", LIST_ARGV).stdout)
        prefixes = [deb_file(n, v) for n, v in resolved["pins"].items()]
        staged = {f: s for f, s in listing.items() if any(f.startswith(p) for p in prefixes)}
        facts.update(packages=resolved["install"], staged=staged, cache=ARCHIVES)
    elif mgr != "apt":
        facts["packages_note"] = ("RHEL: the target's DNF module stream is enabled only in the window, so the "
                                  "driver packages are fetched there")
    return None


def check_staged(ctx: NodeCtx) -> dict[str, Any] | None:
    """In the window (driver stage, before the install): are the staged packages still in the
    cache with the sizes they had? None when nothing was staged."""
    pre = ctx.facts.get("prestage") or {}
    staged = pre.get("staged")
    if not staged:
        return None
    now = parse_listing(ctx.step("staged-packages-now", LIST_ARGV).stdout)
    gone = sorted(f for f in staged if f not in now)
    changed = sorted(f for f in staged if f in now and now[f] != staged[f])
    return {"staged_intact": not gone and not changed, "staged_missing": gone, "staged_changed": changed}
