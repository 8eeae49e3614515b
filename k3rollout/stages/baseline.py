"""Stage 1: capture the baseline before anything changes (docs/domain.md "Evidence first").

Read-only. Captures date, nvidia-smi (table, CSV, topology), the kernel module version,
driver packages, kernel, container runtime, images (tag, digest, CUDA), containers and
the logs of the failed K3 attempt, scheduler state and fabric manager state, and what a
driver rollback needs, as the node's driver backend says (stages/driver: for host
packages every nvidia-*/libnvidia-* package with version and origin repository, holds,
the DNF module stream, /etc/modprobe.d, Secure Boot; for the GPU Operator the
NVIDIADriver pool label the node is in). Every output goes to evidence; the parsed facts become the node's baseline, which the rollback plan
restores to.
"""

from __future__ import annotations

from typing import Any

from k3rollout.checks import parsers
from k3rollout.checks.cuda_table import compat_verdict
from k3rollout.errors import K3RolloutError
from k3rollout.stages import workload_probes
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.driver import driver_backend_for
from k3rollout.stages.spec import StageSpec, kind


def run(ctx: NodeCtx) -> StageOutcome:
    p = ctx.params
    f: dict[str, Any] = {}
    ctx.step("date", ["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"])
    osr = ctx.step("os-release", ["cat", "/etc/os-release"])
    f["os_family"] = "RedHat" if any(x in osr.stdout for x in ('ID="rocky"', 'ID="rhel"', "ID=rhel", 'ID="almalinux"')) \
        else "Debian"
    f["pkg_mgr"] = "dnf" if f["os_family"] == "RedHat" else "apt"
    ctx.facts.update(f)
    table = ctx.step("nvidia-smi", ["nvidia-smi"])
    if not table.ok:
        return StageOutcome(False, f"nvidia-smi fails before any change (rc {table.rc}); the node is not a sound "
                                   "baseline", f, table.stdout + table.stderr)
    smi = parsers.parse_smi_table(table.stdout)
    f["cuda_driver_version"] = smi["cuda_version"]
    f.update(ctx.read_gpu())
    proc = ctx.step("proc-driver-version", ["cat", "/proc/driver/nvidia/version"])
    f["module_version"] = parsers.parse_proc_version(proc.stdout) if proc.ok else None
    f["kernel"] = ctx.step("kernel", ["uname", "-r"]).stdout.strip()
    f["boot_id"] = ctx.read_boot_id()
    ctx.facts.update(f)
    driver = driver_backend_for(ctx.vars)
    driver.baseline_facts(ctx, f)
    ctx.step("nvidia-topology", ["nvidia-smi", "topo", "-m"])
    fm = ctx.step("fabricmanager", ["systemctl", "is-active", "nvidia-fabricmanager"])
    f["fabricmanager"] = fm.stdout.strip() or "unknown"

    wl = ctx.workload
    try:
        f.update(wl.runtime_facts(ctx))
    except K3RolloutError as exc:
        # without the node's workloads on record nothing could be proven back: no change
        return StageOutcome(False, f"cannot record the node's workloads: {exc}", f)

    target = ctx.image_facts(p.image, "target-image-inspect")
    f["target_image"] = p.image
    f["target_image_cached"] = target is not None
    f["target_image_digest"] = target["digest"] if target else None
    f["target_image_cuda"] = target["cuda"] if target else None
    if target and target["cuda"] and f.get("driver_version"):
        f["target_image_compat"] = compat_verdict(f["driver_version"], target["cuda"])

    try:
        f["serving_containers"] = wl.serving_workloads(ctx, f["containers"])
    except K3RolloutError as exc:
        return StageOutcome(False, f"cannot record the node's serving workloads: {exc}", f)
    f["prior_failures"] = wl.prior_failures(ctx, f["containers"], list(p.failure_containers))
    # each serving workload proven as it is now, to be proven the same way once it is back
    f["workload_probe_specs"] = [s.model_dump(exclude_none=True) for s in p.workload_probes]
    f["workload_probes"] = workload_probes.run(ctx, f["serving_containers"], list(p.workload_probes), "baseline")

    f["scheduler"] = ctx.scheduler.kind
    f["scheduler_state"] = ctx.read_scheduler()
    owner = getattr(ctx.scheduler, "driver_owner", None)
    if owner is not None:
        try:
            f["driver_owner"] = owner(ctx)
        except K3RolloutError as exc:
            return StageOutcome(False, str(exc), f)
        why = driver.owner_facts(ctx, f)
        if why is not None:
            return StageOutcome(False, why, f)
    return StageOutcome(True, "", f)


SPEC = StageSpec(kind("baseline"), run=run)
