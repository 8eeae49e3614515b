"""The driver stage through the NVIDIA GPU Operator (inventory ``k3_driver_backend: gpu-operator``).

On a Kubernetes node whose driver the GPU Operator runs as a container, the driver is not a
host package: the operator's ``NVIDIADriver`` resources (``nvidia.com/v1alpha1``) each name a
driver version and a ``spec.nodeSelector``, and a node runs the driver of the resource whose
selector matches its labels
(https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/latest/gpu-driver-configuration.html).
So the upgrade of a (cordoned, drained) node is a label change: ``k3_gpu_operator_pool_label``
set to ``k3_gpu_operator_pool``, the pool whose NVIDIADriver runs the target version. The
operator's upgrade controller then replaces the node's driver pod and publishes its progress
as the node label ``nvidia.com/gpu-driver-upgrade-state``: upgrade-required, cordon-required,
wait-for-jobs-required, pod-deletion-required, drain-required, pod-restart-required,
validation-required, uncordon-required, upgrade-done, or upgrade-failed
(NVIDIA/k8s-operator-libs ``pkg/upgrade/consts.go``). A node cordoned before the upgrade
stays cordoned after it (the controller records that in the annotation
``nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable``): the uncordon stage
still decides.

Every request is a journaled API call from the controller: the pool check, the label patch
(``once``, settled after a crash by reading the label back) and the watch of the state
label (polled), whose evidence holds each state seen and when. No host package command and no
reboot is sent to the node; afterwards nvidia-smi and /proc/driver/nvidia/version on the
node (reads) must report the target. The rollback (stages/rollback.py) moves the node
back to the pool label value recorded at baseline and waits the same way.

``GpuOperator`` is this backend behind the ``DriverBackend`` protocol (stages/driver/base.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from k3rollout.checks import parsers
from k3rollout.scheduler.k8s_api import (
    GPU_OPERATOR_DONE,
    GPU_OPERATOR_FAILED,
    GPU_OPERATOR_STATE_LABEL,
    KubernetesApi,
    KubernetesError,
)
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.driver.base import BACKEND_VAR, Check, RestoreParams, Run

POOL_LABEL_VAR = "k3_gpu_operator_pool_label"
POOL_VAR = "k3_gpu_operator_pool"
GPU_OPERATOR = "gpu-operator"


def how_to_use() -> str:
    """The fix for a host package upgrade refused on an operator-owned node: this backend,
    with the variables it needs (docs/schedulers.md, the GPU Operator)."""
    return (f"upgrade it through the GPU Operator instead: k3rollout does that with the host vars "
            f"{BACKEND_VAR}: {GPU_OPERATOR}, {POOL_LABEL_VAR} (the node label the nodeSelector of the operator's "
            f"NVIDIADriver resources matches, e.g. driver.config) and {POOL_VAR} (that label's value for the pool "
            "whose NVIDIADriver runs the target driver); it then moves the node into that pool and watches "
            "nvidia.com/gpu-driver-upgrade-state to upgrade-done")


def poll_interval(timeout: float) -> float:
    return min(5.0, max(0.05, timeout / 100))


def _server(ctx: NodeCtx) -> str:
    return str(ctx.runner.kube(ctx).server)


def pool_driver(ctx: NodeCtx, label: str, pool: str | None) -> tuple[str | None, str]:
    """The driver version of the NVIDIADriver whose nodeSelector a node with
    ``label=pool`` (and its other labels) matches: (version or None, why not)."""
    def ask(a: KubernetesApi) -> dict[str, Any]:
        labels = {k: v for k, v in a.node(ctx.node)["labels"].items() if k != label}
        if pool is not None:
            labels[label] = pool
        drivers = a.nvidia_drivers()
        match = [d for d in drivers if d["nodeSelector"] and all(labels.get(k) == v for k, v in d["nodeSelector"].items())]
        return {"pool": {label: pool}, "nvidiadrivers": drivers, "matches": [d["name"] for d in match],
                "version": match[0]["version"] if len(match) == 1 else None}

    res = ctx.runner.call(ctx, "nvidiadriver-pool", ["GET", "nvidia.com/v1alpha1/nvidiadrivers",
                                                                   f"node {ctx.node} with {label}={pool}"],
                          lambda: ask(ctx.runner.kube(ctx)), ran_on=_server(ctx))
    if not res.ok:
        return None, f"cannot read the GPU Operator's NVIDIADriver resources: {res.error}"
    if len(res.answer["matches"]) != 1:
        return None, (f"{len(res.answer['matches'])} NVIDIADriver resources select {ctx.node} with {label}={pool} "
                      f"({', '.join(res.answer['matches']) or 'none'}); exactly one must")
    return res.answer["version"], ""


def move_and_wait(ctx: NodeCtx, name: str, label: str, pool: str | None, timeout: float,
                  expect_change: bool = True) -> tuple[bool, str, dict[str, Any]]:
    """Set (or, with None, remove) the node's pool label and watch the operator's state
    label until upgrade-done. (ok, why not, what was seen). With ``expect_change`` an
    upgrade-done or upgrade-failed left from an earlier upgrade does not count until the
    label has shown another state (the operator may take a moment to notice the move)."""
    api = ctx.runner.kube(ctx)
    try:
        before = api.node(ctx.node)["labels"].get(GPU_OPERATOR_STATE_LABEL)
    except KubernetesError as exc:
        return False, f"cannot read {ctx.node}: {exc}", {}

    def placed(c: NodeCtx, meta: dict[str, Any]) -> bool:
        try:
            return bool(c.runner.kube(c).node(c.node)["labels"].get(label) == pool)
        except KubernetesError:
            return False

    def patch() -> dict[str, Any]:
        api.label(ctx.node, {label: pool})
        return {"labels": {label: api.node(ctx.node)["labels"].get(label)}}

    res = ctx.runner.call(ctx, f"{name}-pool", ["PATCH", f"nodes/{ctx.node}", f"{label}={pool}"], patch,
                          ran_on=api.server, once=True, probe=placed, meta={"state_before": before})
    if not res.ok:
        return False, f"could not move {ctx.node} to {label}={pool}: {res.error}", {}
    prior = ctx.runner.prior_meta(ctx, f"{name}-pool") or {}
    stale = prior.get("state_before", before)

    def watch() -> dict[str, Any]:
        final, seen = api.wait_for_label(ctx.node, GPU_OPERATOR_STATE_LABEL, (GPU_OPERATOR_DONE, GPU_OPERATOR_FAILED),
                                         timeout, poll_s=poll_interval(timeout),
                                         since=stale if expect_change and stale in (GPU_OPERATOR_DONE,
                                                                                    GPU_OPERATOR_FAILED) else None)
        answer = {"final": final, "states": [s["value"] for s in seen], "seen": seen, "timeout_s": timeout}
        if final != GPU_OPERATOR_DONE:
            exc = KubernetesError(
                f"the GPU Operator reports {GPU_OPERATOR_STATE_LABEL}={GPU_OPERATOR_FAILED} on {ctx.node}"
                if final == GPU_OPERATOR_FAILED else
                f"the GPU Operator did not reach {GPU_OPERATOR_DONE} on {ctx.node} within {timeout:g}s "
                f"(last {GPU_OPERATOR_STATE_LABEL}={seen[-1]['value'] if seen else None})")
            exc.answer = answer          # type: ignore[attr-defined]
            raise exc
        return answer

    # polled with GETs (every poll_interval), not a Kubernetes watch: each read is the same
    # request after a crash or a dropped connection
    res = ctx.runner.call(ctx, f"{name}-watch", ["POLL", f"nodes/{ctx.node}", f"label {GPU_OPERATOR_STATE_LABEL}",
                                                 f"until={GPU_OPERATOR_DONE}|{GPU_OPERATOR_FAILED}",
                                                 f"every={poll_interval(timeout):g}s", f"timeout={timeout:g}s"],
                          watch, ran_on=api.server)
    seen = res.answer or {}
    if not res.ok:
        return False, res.error, seen
    return True, "", seen


def read_driver(ctx: NodeCtx) -> dict[str, Any]:
    """What the node reports now (reads only): nvidia-smi and the loaded kernel module."""
    f: dict[str, Any] = dict(ctx.read_gpu())
    proc = ctx.step("proc-driver-version", ["cat", "/proc/driver/nvidia/version"])
    f["module_version"] = parsers.parse_proc_version(proc.stdout) if proc.ok else None
    return f


def run(ctx: NodeCtx) -> StageOutcome:
    p = ctx.params
    target = p.target_driver
    label, pool = str(ctx.vars[POOL_LABEL_VAR]), str(ctx.vars[POOL_VAR])
    facts: dict[str, Any] = {"driver_backend": GPU_OPERATOR, "gpu_operator_target_pool": {label: pool}}
    if ctx.facts.get("driver_version") == target and ctx.facts.get("module_version") == target:
        return StageOutcome(True, f"already at {target}: nothing to change", {**facts,
                                                                               "driver_upgrade": "already-at-target"})
    version, why = pool_driver(ctx, label, pool)
    if version is None:
        return StageOutcome(False, why + ". Nothing was changed.", facts, why)
    if version != target:
        why = f"the NVIDIADriver pool {label}={pool} runs driver {version}, not the target {target}. Nothing was changed."
        return StageOutcome(False, why, facts, why)
    ok, why, seen = move_and_wait(ctx, "operator-upgrade", label, pool, float(p.operator_timeout))
    facts["gpu_operator_states"] = seen.get("states", [])
    if not ok:
        return StageOutcome(False, why, facts, why)
    got = read_driver(ctx)
    facts.update(got)
    if got.get("driver_version") != target:
        why = f"driver is not {target} after the GPU Operator's upgrade: " + (
            got.get("gpu_error") or f"nvidia-smi reports {got.get('driver_version')}")
        return StageOutcome(False, why, facts, why)
    if got.get("module_version") != target:
        why = f"loaded kernel module is {got.get('module_version')}, expected {target}"
        return StageOutcome(False, why, facts, why)
    return StageOutcome(True, "", facts)


def restore(ctx: NodeCtx, step: dict[str, Any]) -> tuple[bool, str]:
    """Rollback: the node back into the pool it was in at baseline, then wait as the
    upgrade did and check the node reports the baseline's driver."""
    want, label, pool = step.get("to_version"), step["pool_label"], step.get("pool")
    now = read_driver(ctx)
    try:
        here = ctx.runner.kube(ctx).node(ctx.node)["labels"].get(label)
    except KubernetesError as exc:
        return False, f"cannot read {ctx.node}'s pool label: {exc}"
    if here == pool and now.get("driver_version") == want and now.get("module_version") == want:
        return True, f"already in {label}={pool} on {want}: nothing to restore"
    # a node still on its baseline driver (the operator never replaced it) needs no new pod
    on_want = now.get("driver_version") == want and now.get("module_version") == want
    ok, why, _ = move_and_wait(ctx, "restore-operator", label, pool, float(step.get("timeout", 3600)),
                               expect_change=not on_want)
    if not ok:
        return False, why
    now = read_driver(ctx)
    if now.get("driver_version") != want or now.get("module_version") != want:
        return False, (f"after moving back to {label}={pool} the node reports {now.get('driver_version')} "
                       f"(module {now.get('module_version')}; {now.get('gpu_error', '')}), expected {want}")
    return True, f"driver restored to {want} by the GPU Operator ({label}={pool})"


class GpuOperator:
    """The driver as the GPU Operator's container, changed by the node's pool label."""

    kind = GPU_OPERATOR
    uses_kubernetes_api = True

    def baseline_facts(self, ctx: NodeCtx, f: dict[str, Any]) -> None:
        # the driver is the GPU Operator's container, not host packages: none is queried
        f["driver_backend"] = GPU_OPERATOR
        f["driver_packages"] = []

    def owner_facts(self, ctx: NodeCtx, f: dict[str, Any]) -> str | None:
        if f["driver_owner"] != "gpu-operator":
            return (f"{BACKEND_VAR} is gpu-operator, but the NVIDIA GPU Operator does not run this node's driver "
                    "(no driver DaemonSet pod here). Nothing was changed.")
        # the pool the node is in now: the rollback moves it back there
        label = str(ctx.vars[POOL_LABEL_VAR])
        res = ctx.runner.call(ctx, "gpu-operator-pool", ["GET", f"nodes/{ctx.node}", f"label {label}"],
                              lambda: {"labels": {label: ctx.runner.kube(ctx).node(ctx.node)["labels"].get(label)}},
                              ran_on=ctx.runner.kube(ctx).server)
        if not res.ok:
            return f"cannot read {ctx.node}'s driver pool label {label}: {res.error}"
        f["gpu_operator_pool_label"] = label
        f["gpu_operator_pool"] = res.answer["labels"][label]
        return None

    def upgrade(self, ctx: NodeCtx) -> StageOutcome:
        return run(ctx)

    def restore_plan(self, step: dict[str, Any], node: str, baseline: dict[str, Any], tvars: dict[str, Any],
                     params: RestoreParams) -> None:
        # back into the NVIDIADriver pool baseline saw
        step.update({"backend": GPU_OPERATOR, "to_version": baseline.get("driver_version"),
                     "pool_label": baseline.get("gpu_operator_pool_label") or tvars.get(POOL_LABEL_VAR),
                     "pool": baseline.get("gpu_operator_pool"), "timeout": params.operator_timeout})
        if "gpu_operator_pool_label" not in baseline:
            step["error"] = "baseline did not record the node's NVIDIADriver pool label"

    def describe_restore(self, step: dict[str, Any]) -> str:
        if step.get("error"):
            return f"restore_driver to {step.get('to_version')}: NONE ({step['error']})"
        return (f"restore_driver to {step.get('to_version')}: move the node back to the GPU Operator's NVIDIADriver "
                f"pool {step['pool_label']}={step.get('pool')}; wait for nvidia.com/gpu-driver-upgrade-state="
                f"upgrade-done; verify nvidia-smi and kernel module report {step.get('to_version')}")

    def restore(self, ctx: NodeCtx, step: dict[str, Any], untouched: str | None) -> tuple[bool, str]:
        # whether or not the stage changed the node, it is put in the pool baseline saw
        if step.get("error"):
            return False, step["error"]
        return restore(ctx, step)

    def preflight_owner(self, owned_by_operator: bool, hvars: dict[str, Any]) -> tuple[bool, str]:
        return owned_by_operator, (
            "the GPU Operator's driver container owns this node's driver: upgraded through its NVIDIADriver "
            f"pool {hvars.get(POOL_LABEL_VAR)}={hvars.get(POOL_VAR)}" if owned_by_operator else
            f"{BACKEND_VAR} is gpu-operator, but no GPU Operator driver container runs here (/run/nvidia/driver)")

    def preflight(self, run: Run, hvars: dict[str, Any], target: str, source: str, os_facts: dict[str, Any],
                  info: dict[str, Any], ansible: Callable[[], tuple[bool, str]] | None) -> Iterator[Check]:
        # the driver is the operator's container, changed by a pool label: no host
        # package is installed or restored, so none is queried
        return iter(())

    def prestage(self, step: Run, ctx: NodeCtx, os_facts: dict[str, Any], facts: dict[str, Any]
                 ) -> StageOutcome | None:
        # the GPU Operator's driver container brings the driver: nothing to fetch on the host
        facts["packages_note"] = ("GPU Operator: the driver comes in the NVIDIADriver pool's container image, "
                                  "pulled by the operator; no host packages are staged")
        return None
