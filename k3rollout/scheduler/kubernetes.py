"""``scheduler: kubernetes``: the Kubernetes API, called from the controller.

A kubeadm worker holds only the kubelet's ``system:node:<name>`` identity, which the Node
authorizer and NodeRestriction do not let read DaemonSets, evict pods or cordon nodes:
``kubectl drain <itself>`` on the node stops on Forbidden. So nothing here runs on the
node being changed: every operation is a request from the controller to the API server,
through ``KubernetesApi`` (the official client; k3rollout/scheduler/k8s_api.py says why
not ``kubectl``), with the kubeconfig the inventory names (``k3_kubeconfig``,
``k3_kube_context``), the simulated cluster's, or the client's default (``$KUBECONFIG``,
``~/.kube/config``). Each request is journaled as a step of its node (``ran_on`` is the
API server's URL), its answer kept as evidence; the ones that change the cluster are
``once`` steps, settled by a probe of the API after a crash.

Progress is published on the node as the label ``k3rollout.io/upgrade-state`` (as the GPU
Operator publishes ``nvidia.com/gpu-driver-upgrade-state``): ``cordon-required``,
``upgrade-required``, ``validation-required``, ``uncordon-required``, ``upgrade-done``,
``upgrade-failed``, ``quarantined``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from k3rollout.scheduler.base import NodeCtx
from k3rollout.scheduler.k8s_api import UPGRADE_STATE_LABEL, KubernetesApi, KubernetesError

UPGRADE_STATES = ("cordon-required", "upgrade-required", "validation-required", "uncordon-required",
                  "upgrade-done", "upgrade-failed", "quarantined")


class Kubernetes:
    kind = "kubernetes"

    def where(self, ctx: NodeCtx) -> str:
        return str(ctx.runner.kube(ctx).server)

    def _call(self, ctx: NodeCtx, name: str, what: list[str], fn: Callable[[KubernetesApi], Any], **kw: Any) -> Any:
        api = ctx.runner.kube(ctx)
        return ctx.runner.call(ctx, name, what, lambda: fn(api), ran_on=api.server, **kw)

    # ------------------------------------------------------------ reads

    def read_state(self, ctx: NodeCtx) -> str:
        res = self._call(ctx, "scheduler-state", ["GET", f"nodes/{ctx.node}"], lambda a: a.node(ctx.node))
        if not res.ok:
            return "unknown"
        return "cordoned" if res.answer["unschedulable"] else "schedulable"

    def idle(self, ctx: NodeCtx) -> tuple[bool, str]:
        res = self._call(ctx, "scheduler-idle", ["GET", f"pods?fieldSelector=spec.nodeName={ctx.node}"],
                         lambda a: {"gpu_pods": a.gpu_pods_on(ctx.node)})
        if not res.ok:
            return False, f"could not list the node's pods: {res.error}"
        pods = res.answer["gpu_pods"]
        if pods:
            shown = ", ".join(pods[:3]) + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
            return False, f"{len(pods)} pod(s) requesting nvidia.com/gpu run there ({shown})"
        return True, "no pod there requests nvidia.com/gpu"

    def driver_owner(self, ctx: NodeCtx) -> str | None:
        """``"gpu-operator"`` when the NVIDIA GPU Operator runs this node's driver as a
        container (a host package upgrade must not be attempted there), else None."""
        res = self._call(ctx, "gpu-operator-check", ["GET", f"nodes/{ctx.node}", f"pods?spec.nodeName={ctx.node}"],
                         lambda a: {"gpu_operator_manages_driver": a.gpu_operator_manages_driver(ctx.node)})
        if not res.ok:
            raise KubernetesError(f"cannot tell whether the GPU Operator manages the driver: {res.error}")
        return "gpu-operator" if res.answer["gpu_operator_manages_driver"] else None

    @staticmethod
    def _unschedulable(ctx: NodeCtx) -> bool:
        try:
            return bool(ctx.runner.kube(ctx).node(ctx.node)["unschedulable"])
        except KubernetesError:
            return False

    @staticmethod
    def _drained(ctx: NodeCtx, meta: dict[str, Any]) -> bool:
        """Settles a drain interrupted by a crash: cordoned, and nothing left to evict."""
        api = ctx.runner.kube(ctx)
        try:
            if not api.node(ctx.node)["unschedulable"]:
                return False
            return not [p for p in api.pods_on(ctx.node) if not api.left_alone(p)
                        and not (p.status and p.status.phase in ("Succeeded", "Failed"))]
        except KubernetesError:
            return False

    # ------------------------------------------------------------ changes

    def progress(self, ctx: NodeCtx, state: str) -> bool:
        """Publish ``k3rollout.io/upgrade-state=state`` on the node (journaled; a refusal is
        recorded and returned, not raised: the label informs, it does not gate)."""
        assert state in UPGRADE_STATES, state
        ok, _ = self._set_labels(ctx, f"upgrade-state-{state}", {UPGRADE_STATE_LABEL: state})
        return ok

    def _set_labels(self, ctx: NodeCtx, name: str, labels: dict[str, str]) -> tuple[bool, str]:
        def probe(c: NodeCtx, m: dict[str, Any]) -> bool:
            try:
                have = c.runner.kube(c).node(c.node)["labels"]
            except KubernetesError:
                return False
            return all(have.get(k) == v for k, v in labels.items())

        def do(a: KubernetesApi) -> dict[str, Any]:
            after = a.label(ctx.node, dict(labels))
            return {"labels": {k: v for k, v in after.items() if k in labels}}

        res = self._call(ctx, name, ["PATCH", f"nodes/{ctx.node}", *(f"{k}={v}" for k, v in labels.items())], do,
                         once=True, probe=probe)
        return res.ok, res.error

    def cordon(self, ctx: NodeCtx) -> tuple[bool, str, str]:
        timeout = float(ctx.params.drain_timeout)
        retry = min(5.0, max(0.2, timeout / 10))
        self.progress(ctx, "cordon-required")

        def drain(a: KubernetesApi) -> dict[str, Any]:
            r = a.drain(ctx.node, timeout, retry_s=retry)
            answer = {"ok": r.ok, "evicted": r.evicted, "left_alone": r.skipped, "blocked": r.blocked,
                      "attempts": r.attempts, "waited_s": round(r.waited_s, 3)}
            if not r.ok:
                exc = KubernetesError(r.message)
                exc.answer = answer          # type: ignore[attr-defined]
                raise exc
            return answer

        res = self._call(ctx, "drain", ["DRAIN", f"nodes/{ctx.node}", "policy/v1 evictions",
                                        f"timeout={timeout:g}s"], drain, once=True, probe=self._drained,
                         meta={"state_before": ctx.baseline.get("scheduler_state")})
        if not res.ok:
            return False, f"drain failed: {res.error}", res.error
        self.progress(ctx, "upgrade-required")
        return True, "", ""

    def uncordon(self, ctx: NodeCtx, name: str) -> tuple[bool, str]:
        def do(a: KubernetesApi) -> dict[str, Any]:
            a.uncordon(ctx.node)
            return {"unschedulable": a.node(ctx.node)["unschedulable"]}

        res = self._call(ctx, name, ["PATCH", f"nodes/{ctx.node}", "spec.unschedulable=null"], do,
                         once=True, probe=lambda c, m: not self._unschedulable(c))
        return res.ok, "" if res.ok else f"uncordon failed: {res.error}"

    def label(self, ctx: NodeCtx, name: str, key: str, value: str) -> tuple[bool, str]:
        ok, err = self._set_labels(ctx, name, {key: value})
        return ok, "" if ok else f"could not label {key}={value}: {err}"

    def quarantine(self, ctx: NodeCtx, label: str) -> tuple[bool, str]:
        # through the API server only: a node that never came back is quarantined all the same
        res = self._call(ctx, "quarantine-1", ["PATCH", f"nodes/{ctx.node}", "spec.unschedulable=true"],
                         lambda a: {"was_unschedulable": a.cordon(ctx.node)}, once=True,
                         probe=lambda c, m: self._unschedulable(c))
        if not res.ok:
            return False, f"could not quarantine: {res.error}"
        ok, err = self._set_labels(ctx, "quarantine-2", {label: ctx.run_id, UPGRADE_STATE_LABEL: "quarantined"})
        if not ok:
            return False, f"could not label the quarantined node: {err}"
        if self.read_state(ctx) == "schedulable":
            return False, "node is schedulable after quarantine"
        return True, f"quarantined: cordoned and labelled {label}={ctx.run_id}"

    def describe_quarantine(self, label: str) -> str:
        return f"cordon and label {label}=<run id> through the Kubernetes API"
