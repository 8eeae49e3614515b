"""``scheduler: kubernetes``: kubectl drain / uncordon / label, run through the node's own
transport (as before the scheduler seam; moving them to the controller is a later change)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from k3rollout.checks import parsers
from k3rollout.scheduler.base import OUT_OF_SERVICE

if TYPE_CHECKING:
    from k3rollout.stages.base import NodeCtx


class Kubernetes:
    kind = "kubernetes"

    def where(self, ctx: NodeCtx) -> str | None:
        return None

    def read_state(self, ctx: NodeCtx) -> str:
        res = ctx.step("scheduler-state", ["kubectl", "get", "node", ctx.node, "-o", "jsonpath={.spec.unschedulable}"])
        return parsers.scheduler_state(self.kind, res.stdout) if res.ok else "unknown"

    def cordon(self, ctx: NodeCtx) -> tuple[bool, str, str]:
        timeout = ctx.params.drain_timeout
        res = ctx.step("drain", ["kubectl", "drain", ctx.node, "--ignore-daemonsets", "--delete-emptydir-data",
                                 f"--timeout={int(timeout)}s"],
                       once=True, probe=lambda c, m: self.read_state(c) in OUT_OF_SERVICE, timeout=timeout + 60)
        if not res.ok:
            return False, f"drain failed (rc {res.rc})", res.tail(2000)
        return True, "", ""

    def uncordon(self, ctx: NodeCtx, name: str) -> tuple[bool, str]:
        res = ctx.step(name, ["kubectl", "uncordon", ctx.node], once=True,
                       probe=lambda c, m: self.read_state(c) == "schedulable")
        return res.ok, "" if res.ok else f"uncordon failed (rc {res.rc}): {res.tail(200)}"

    def label(self, ctx: NodeCtx, name: str, key: str, value: str) -> tuple[bool, str]:
        res = ctx.step(name, ["kubectl", "label", "node", ctx.node, f"{key}={value}", "--overwrite"], once=True,
                       probe=lambda c, m: self.read_state(c) != "schedulable")
        return res.ok, "" if res.ok else f"could not label {key}={value} (rc {res.rc}): {res.tail(200)}"

    def quarantine(self, ctx: NodeCtx, label: str) -> tuple[bool, str]:
        cmds = [["kubectl", "cordon", ctx.node],
                ["kubectl", "label", "node", ctx.node, f"{label}={ctx.run_id}", "--overwrite"]]
        for i, argv in enumerate(cmds, start=1):
            res = ctx.step(f"quarantine-{i}", argv, once=True, probe=lambda c, m: self.read_state(c) != "schedulable")
            if not res.ok:
                return False, f"could not quarantine (rc {res.rc}): {res.tail(200)}"
        if self.read_state(ctx) == "schedulable":
            return False, "node is schedulable after quarantine"
        return True, f"quarantined: cordoned and labelled {label}={ctx.run_id}"

    def describe_quarantine(self, label: str) -> str:
        return f"kubectl cordon; kubectl label node {label}=<run id>"
