"""Rollback: the per-node plan recorded after baseline, and its execution.

The plan is built once, from baseline facts, before any change (driver back to the exact
packages baseline saw, serving containers back on their original image digest, node back
to its prior scheduler state) and written to the journal. Execution runs the recorded
plan, never a re-derived one, in a fixed safe order, and only the actions whose stage
actually started on the node. A step that cannot be proven done fails the rollback: the
node stays cordoned and is reported ``rollback_failed``.
"""

from __future__ import annotations

import shlex
from typing import Any

from k3rollout.checks import driver_facts as df
from k3rollout.errors import StepFailed
from k3rollout.model.assertions import AssertionSyntaxError, render_argv, template_context
from k3rollout.model.playbook import ROLLBACK_ORDER, ROLLBACK_UNDOES, Playbook
from k3rollout.scheduler import scheduler_for
from k3rollout.stages import driver_node as dn
from k3rollout.stages import driver_operator
from k3rollout.stages import uncordon as uncordon_stage
from k3rollout.stages.base import NodeCtx
from k3rollout.stages.driver_upgrade import packages_at, pinned, reboot_and_wait
from k3rollout.workload import workload_for

ORDER = ROLLBACK_ORDER
QUARANTINE_LABEL = "k3rollout.io/quarantine"
TEST_CONTAINERS = ("k3rollout-smoke", "k3rollout-features")


def plan_rollback(playbook: Playbook, node: str, baseline: dict[str, Any], tvars: dict[str, Any]) -> list[dict]:
    declared = {rb.action: rb for rb in playbook.rollback_actions()}
    reboot_timeout, reboot_grace, operator_timeout = 900.0, 10.0, 3600.0
    restore = None
    for stage in playbook.stages:
        if stage.stage == "driver_upgrade":
            params = stage.typed_params()
            restore = params.restore
            reboot_timeout = params.reboot_timeout
            reboot_grace = params.reboot_grace
            operator_timeout = params.operator_timeout
    steps: list[dict] = []
    for action in declared:
        step: dict[str, Any] = {"action": action, "undoes": ROLLBACK_UNDOES[action]}
        if action == "stop_test_server":
            step["commands"] = workload_for(tvars).removal_plan(TEST_CONTAINERS)
        elif action == "restore_driver" and driver_operator.backend(tvars) == driver_operator.GPU_OPERATOR:
            # the GPU Operator's driver: back into the NVIDIADriver pool baseline saw
            step.update({"backend": driver_operator.GPU_OPERATOR, "to_version": baseline.get("driver_version"),
                         "pool_label": baseline.get("gpu_operator_pool_label") or tvars.get(driver_operator.POOL_LABEL_VAR),
                         "pool": baseline.get("gpu_operator_pool"), "timeout": operator_timeout})
            if "gpu_operator_pool_label" not in baseline:
                step["error"] = "baseline did not record the node's NVIDIADriver pool label"
        elif action == "restore_driver":
            mgr = baseline.get("pkg_mgr", "apt")
            tmpl = getattr(restore, mgr) if restore else []
            # planned right after baseline: the node's facts are its baseline
            ctx = template_context(tvars, node=node, facts=baseline, baseline=baseline)
            try:
                cmds = [render_argv(t, ctx) for t in tmpl]
            except AssertionSyntaxError as exc:
                cmds = []
                step["error"] = str(exc)
            step.update({"to_version": baseline.get("driver_version"), "commands": cmds,
                         "reboot": declared[action].reboot, "reboot_timeout": reboot_timeout,
                         "reboot_grace": reboot_grace,
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
        elif action == "restore_serving_image":
            step["containers"] = [{"name": c["name"], "image": c["image"], "digest": c.get("digest")}
                                  for c in baseline.get("serving_containers", [])]
        elif action == "uncordon_if_healthy" and playbook.play.on_node_failure == "quarantine":
            # a failed node is rolled back but stays out of service, marked for investigation
            step = {"action": "quarantine", "undoes": ROLLBACK_UNDOES["quarantine"],
                    "scheduler": scheduler_for(tvars).kind, "label": QUARANTINE_LABEL,
                    "prior_state": baseline.get("scheduler_state")}
        elif action == "uncordon_if_healthy":
            step["prior_state"] = baseline.get("scheduler_state")
            step["expect_driver"] = baseline.get("driver_version")
            step["expect_gpus"] = baseline.get("gpu_count")
            # what the baseline saw running must run again before the node serves
            step["expect_running"] = [c["name"] for c in baseline.get("serving_containers", [])]
            step["expect_fabricmanager"] = baseline.get("fabricmanager") == "active"
        steps.append(step)
    return steps


def describe(step: dict) -> str:
    a = step["action"]
    if a == "stop_test_server":
        return "stop_test_server: " + "; ".join(shlex.join(c) for c in step["commands"])
    if a == "restore_driver" and step.get("backend") == driver_operator.GPU_OPERATOR:
        if step.get("error"):
            return f"restore_driver to {step.get('to_version')}: NONE ({step['error']})"
        return (f"restore_driver to {step.get('to_version')}: move the node back to the GPU Operator's NVIDIADriver "
                f"pool {step['pool_label']}={step.get('pool')}; wait for nvidia.com/gpu-driver-upgrade-state="
                f"upgrade-done; verify nvidia-smi and kernel module report {step.get('to_version')}")
    if a == "restore_driver":
        cmds = "; ".join(shlex.join(c) for c in step.get("commands", [])) or f"NONE ({step.get('error')})"
        if step.get("holds") and step.get("commands"):
            cmds += f"; hold again {', '.join(step['holds'])}"
        if step.get("module_options") and step.get("commands"):
            cmds += f"; write back {', '.join(f['file'] for f in step['module_options'])} as the baseline saw it"
        return (f"restore_driver to {step.get('to_version')}: {cmds}"
                + ("; reboot; verify nvidia-smi and kernel module report " + str(step.get("to_version"))
                   if step.get("reboot") else ""))
    if a == "restore_serving_image":
        items = ", ".join(f"{c['name']} on {c['image']}@{(c.get('digest') or '?').split('@')[-1][:19]}"
                          for c in step["containers"]) or "none were running"
        return f"restore_serving_image: restart {items}"
    if a == "quarantine":
        how = scheduler_for(step).describe_quarantine(step["label"])
        return f"quarantine: keep cordoned and mark it ({how}); counted against the failure budget"
    if a == "uncordon_if_healthy":
        if step.get("prior_state") != "schedulable":
            return f"uncordon_if_healthy: keep cordoned (was {step.get('prior_state')} before the run)"
        also = "".join([f", {', '.join(step['expect_running'])} running" if step.get("expect_running") else "",
                        ", the fabric manager active" if step.get("expect_fabricmanager") else ""])
        return (f"uncordon_if_healthy: uncordon only if nvidia-smi shows {step.get('expect_gpus')} GPUs on "
                f"{step.get('expect_driver')}{also}; otherwise keep cordoned")
    return a


def execute(ctx: NodeCtx, steps: list[dict], entered: set[str], *,
            untouched: str | None = None) -> tuple[bool, list[dict]]:
    """Run the recorded plan; returns (all ok, per-action results). ``untouched``: why the
    journal proves the driver stage changed nothing (engine/rollback.py): the driver is not
    restored, what the stage stopped is started again, and the node goes back as it was."""
    results = []
    ok_all = True
    # a runtime that opened the node for its checks (Slurm's maintenance reservation, the
    # node resumed into it) drains it again and closes it before anything is restored
    close = getattr(ctx.workload, "close_node", None)
    if close is not None:
        try:
            ok, detail = close(ctx)
        except StepFailed as exc:
            ok, detail = False, str(exc)
        results.append({"action": "close_checks", "status": "done" if ok else "failed", "detail": detail})
        if not ok:
            return False, results + [{"action": "rollback", "status": "skipped",
                                      "detail": "the node could not be drained again: nothing was restored"}]
    for step in steps:
        a = step["action"]
        if not _needed(step, entered):
            results.append({"action": a, "status": "not_needed", "detail": f"{step['undoes']} never started"})
            continue
        try:
            if a == "restore_driver" and untouched and step.get("backend") != driver_operator.GPU_OPERATOR:
                ok, detail = _as_it_was(ctx, step, untouched)
            else:
                ok, detail = _ACTIONS[a](ctx, step)
        except StepFailed as exc:
            ok, detail = False, str(exc)
        results.append({"action": a, "status": "done" if ok else "failed", "detail": detail})
        if a == "uncordon_if_healthy":
            _publish_failed(ctx)
        if not ok:
            ok_all = False
            if a == "restore_driver":
                # Without a sound driver the node must stay out of service: skip the rest
                # except keeping it cordoned, which it already is. A quarantine still runs:
                # it needs only the scheduler (a node that never came back is marked too).
                _publish_failed(ctx)
                for rest in steps[steps.index(step) + 1:]:
                    if rest["action"] == "quarantine":
                        try:
                            qok, qdetail = _quarantine(ctx, rest)
                        except StepFailed as exc:
                            qok, qdetail = False, str(exc)
                        results.append({"action": "quarantine", "status": "done" if qok else "failed",
                                        "detail": qdetail})
                        continue
                    results.append({"action": rest["action"], "status": "skipped",
                                    "detail": "driver restore failed; node kept cordoned"})
                break
    return ok_all, results


def _needed(step: dict, entered: set[str]) -> bool:
    """An action runs when the stage it undoes started on the node. Restarting the serving
    containers is also owed after any driver change: the reboots stop them, and a failure
    before the smoke test (which stops them itself) must not leave them down."""
    if step["undoes"] in entered:
        return True
    return step["action"] == "restore_serving_image" and "driver_upgrade" in entered


def unreachable(ctx: NodeCtx, steps: list[dict]) -> list[dict]:
    """For a node the rollback cannot reach: the plan's actions that need only its scheduler
    (quarantine: cordon and mark it through the API), and its progress published as failed."""
    results = []
    _publish_failed(ctx)
    for step in steps:
        if step["action"] == "quarantine":
            try:
                ok, detail = _quarantine(ctx, step)
            except StepFailed as exc:
                ok, detail = False, str(exc)
            results.append({"action": "quarantine", "status": "done" if ok else "failed", "detail": detail})
    return results


def _publish_failed(ctx: NodeCtx) -> None:
    try:
        ctx.publish_progress("upgrade-failed")
    except StepFailed:
        pass    # the label informs; the rollback's own result already says what happened


def _stop_test(ctx: NodeCtx, step: dict) -> tuple[bool, str]:
    # the plan's commands are what the node's runtime runs for these names (its removal_plan)
    for i, name in enumerate(TEST_CONTAINERS, start=1):
        ctx.workload.remove_server(ctx, name, f"stop-test-{i}")
    return True, "test containers removed"


def _restore_driver(ctx: NodeCtx, step: dict) -> tuple[bool, str]:
    if step.get("error"):
        return False, step["error"]
    if step.get("backend") == driver_operator.GPU_OPERATOR:
        return driver_operator.restore(ctx, step)
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
                ok, why, _ = reboot_and_wait(ctx, "restore-reboot", float(step.get("reboot_timeout", 900)),
                                             float(step.get("reboot_grace", 10)))
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
        ok, why, _ = reboot_and_wait(ctx, "restore-reboot", float(step.get("reboot_timeout", 900)),
                                     float(step.get("reboot_grace", 10)))
        if not ok:
            return False, f"reboot after restore: {why}"
    gpu = ctx.read_gpu()
    if gpu.get("driver_version") != want:
        return False, f"after restore nvidia-smi reports {gpu.get('driver_version')} ({gpu.get('gpu_error', '')})"
    also = f"; module options restored: {', '.join(restored)}" if restored else ""
    return True, f"driver restored to {want}{also}"


def _options_file_lines(text: str) -> list[str]:
    # as the baseline's ``grep -rH .`` saw a file: its non-empty lines
    return [line for line in text.splitlines() if line]


def _read_options_file(ctx: NodeCtx, name: str, path: str) -> str | None:
    res = ctx.step(name, ["cat", path])
    return res.stdout if res.ok else None


def _restore_module_options(ctx: NodeCtx, step: dict) -> tuple[bool, str, list[str]]:
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

        def written(c: NodeCtx, meta: dict, p: str = path, n: int = i, w: list[str] = want) -> bool:
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


def _as_it_was(ctx: NodeCtx, step: dict, why: str) -> tuple[bool, str]:
    """The driver stage changed nothing (``why``): no restore and no reboot. It stopped the
    services that hold the GPU and released the holds before its install; on failure it only
    re-enabled the services, for a restore's reboot to start, and there is none here."""
    gpu = ctx.read_gpu()
    if gpu.get("driver_version") != step.get("to_version"):
        # the journal and the node disagree: restore as for any other failure
        return _restore_driver(ctx, step)
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


def _hold_again(ctx: NodeCtx, step: dict, mgr: str) -> tuple[bool, str]:
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


def _restore_serving(ctx: NodeCtx, step: dict) -> tuple[bool, str]:
    return ctx.workload.restore_images(ctx, step["containers"])


def health_problems(ctx: NodeCtx, step: dict) -> list[str]:
    """What keeps a rolled-back node out of service: the bar of the success path (the
    driver and GPUs the baseline saw, every serving container it saw running is running,
    as stages/uncordon.py requires before it uncordons) plus the fabric manager, when the
    baseline saw it active."""
    problems = []
    gpu = ctx.read_gpu()
    if gpu.get("driver_version") != step.get("expect_driver") or gpu.get("gpu_count") != step.get("expect_gpus"):
        problems.append(f"driver {gpu.get('driver_version')}, {gpu.get('gpu_count')} GPUs (baseline: "
                        f"{step.get('expect_driver')}, {step.get('expect_gpus')} GPUs)")
    expect = step.get("expect_running")
    if expect is None:          # a plan recorded before this check existed: the baseline says
        expect = [c["name"] for c in ctx.baseline.get("serving_containers", [])]
    problems += ctx.workload.serving_problems(ctx, list(expect))
    fm_expected = step.get("expect_fabricmanager")
    if fm_expected is None:
        fm_expected = ctx.baseline.get("fabricmanager") == "active"
    if fm_expected:
        fm = ctx.step("health-fabricmanager", ["systemctl", "is-active", "nvidia-fabricmanager"])
        if fm.stdout.strip() != "active":
            problems.append(f"nvidia-fabricmanager is {fm.stdout.strip() or 'unknown'}")
    return problems


def _uncordon(ctx: NodeCtx, step: dict) -> tuple[bool, str]:
    problems = health_problems(ctx, step)
    if problems:
        return False, f"node unhealthy after rollback ({'; '.join(problems)}): kept cordoned"
    ok, why = uncordon_stage.uncordon(ctx, "rollback-uncordon")
    if not ok:
        return ok, why
    # the success path's bar after its uncordon: where owners bring the node's workloads
    # back (Kubernetes), each owner baseline saw is back to its readyReplicas on the same
    # image digest, waited for up to serving_ready_timeout
    proven = ctx.workload.prove_serving(ctx)
    if proven.failed:
        return False, f"uncordoned, but {proven.reason or 'existing workloads are not back: ' + ', '.join(proven.failed)}"
    return ok, why or "uncordoned"


def _quarantine(ctx: NodeCtx, step: dict) -> tuple[bool, str]:
    # the scheduler recorded in the plan, the one the node had when the plan was made
    return scheduler_for(step).quarantine(ctx, step["label"])


_ACTIONS = {"stop_test_server": _stop_test, "restore_driver": _restore_driver,
            "restore_serving_image": _restore_serving, "uncordon_if_healthy": _uncordon, "quarantine": _quarantine}
