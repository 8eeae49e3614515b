"""Stage 3: upgrade the NVIDIA driver with the operator's vendor steps, reboot, verify.

The install commands come from the playbook (``with.install.apt`` / ``.dnf``), rendered
with vars; k3rollout does not invent OS commands (docs/domain.md). Both the install and the
reboot are ``once`` steps: after a crash they are settled by probes (packages at target;
boot id changed), never blindly repeated. Verification after the reboot: nvidia-smi
reports the target, the loaded kernel module matches, DKMS built it.

Around the vendor steps (``stages/driver_procedure.py``, the same for the inline and the
Ansible path): stop and disable what holds the GPU, release and record holds, refuse an
unsigned DKMS module under Secure Boot, resolve exact versions from the node's
repositories (the template variable ``driver``), check the built module before the
reboot, and after it the module parameters and the fabric manager (enabled, active, on
exactly the driver's version), then restart what was stopped.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from k3rollout.checks import parsers
from k3rollout.errors import StepFailed
from k3rollout.model.assertions import render_argv
from k3rollout.model.assertions import template_context as shared_template_context
from k3rollout.stages import driver_operator, prestage
from k3rollout.stages import driver_procedure as procedure
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.spec import StageSpec, kind

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

    def rebooted(c: NodeCtx, meta: dict) -> bool:
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


def run(ctx: NodeCtx) -> StageOutcome:
    if driver_operator.backend(ctx.vars) == driver_operator.GPU_OPERATOR:
        # the GPU Operator's driver container: a pool label change, no host package
        return driver_operator.run(ctx)
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
        staged = prestage.check_staged(ctx)
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

    def upgraded(c: NodeCtx, meta: dict) -> bool:
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


# on pass, the node shows NVIDIA's next upgrade state
SPEC = StageSpec(kind("driver_upgrade"), run=run, publishes_on_pass="validation-required")
