"""``scheduler: slurm``: scontrol, run from the controller, never on the node being changed.

A GPU node is an ordinary Slurm client with no say over other nodes' states; the
operations belong to the machine that administers the cluster. They run as a subprocess
on the controller (``scontrol`` found on PATH, with the controller's ``SLURM_CONF``), or on
the inventory host named by ``k3_scheduler_host`` (e.g. the slurmctld host) through that
host's transport.

Draining is not drained. ``scontrol update State=DRAIN`` only stops new jobs: the jobs
running there go on, and the node shows ``ALLOCATED+DRAIN`` / ``MIXED+DRAIN`` (DRAINING)
until the last one ends, then ``IDLE+DRAIN`` (DRAINED). ``cordon`` waits for DRAINED,
bounded by ``drain_timeout``; a node still running jobs then fails the stage and is not
upgraded or rebooted. ``State=RESUME`` is sent only for a node that was schedulable before
the run (the uncordon stage checks the baseline). Quarantine is a DRAIN with its own reason.
"""

from __future__ import annotations

import time
from typing import Any

from k3rollout.checks import parsers
from k3rollout.errors import StepFailed
from k3rollout.scheduler.base import NodeCtx
from k3rollout.transport.base import CommandResult

CONTROLLER = "controller"
FIRST_POLL_S = 0.25
MAX_POLL_S = 5.0


class Slurm:
    kind = "slurm"

    def where(self, ctx: NodeCtx) -> str | None:
        host = ctx.vars.get("k3_scheduler_host") or CONTROLLER
        if host == ctx.node:
            raise StepFailed(f"{ctx.node}: k3_scheduler_host names the node itself; scheduler operations never run "
                             "on the node being changed")
        return str(host)

    def _step(self, ctx: NodeCtx, name: str, argv: list[str], **kw: Any) -> CommandResult:
        return ctx.step(name, ["scontrol", *argv], on=self.where(ctx), **kw)

    def read_state(self, ctx: NodeCtx) -> str:
        res = self._step(ctx, "scheduler-state", ["show", "node", ctx.node])
        if not res.ok:
            return "unknown"
        try:
            return parsers.scheduler_state(self.kind, res.stdout)
        except parsers.ParseError:
            return "unknown"

    def idle(self, ctx: NodeCtx) -> tuple[bool, str]:
        res = self._step(ctx, "scheduler-idle", ["show", "node", ctx.node])
        if not res.ok:
            return False, f"scontrol show node failed (rc {res.rc}): {res.tail(200)}"
        try:
            idle, state = parsers.scontrol_node_idle(res.stdout)
        except parsers.ParseError as exc:
            return False, f"scontrol show node: {exc}"
        return idle, f"Slurm shows it {state}" + ("" if idle else " (jobs run, complete or are planned there)")

    def _drain_set(self, ctx: NodeCtx, meta: dict[str, Any] | None = None) -> bool:
        return self.read_state(ctx) in ("draining", "cordoned")

    def cordon(self, ctx: NodeCtx) -> tuple[bool, str, str]:
        timeout = float(ctx.params.drain_timeout)
        before = self.read_state(ctx)
        # a node someone else drained keeps their Reason: only a schedulable one is drained
        # here (or one whose drain this run started before a crash: the step settles it)
        if before not in ("draining", "cordoned") or ctx.runner.prior_meta(ctx, "drain") is not None:
            res = self._step(ctx, "drain", ["update", f"NodeName={ctx.node}", "State=DRAIN",
                                            f"Reason=k3rollout {ctx.run_id}"], once=True, probe=self._drain_set,
                             meta={"state_before": before})
            if not res.ok:
                return False, f"drain failed (rc {res.rc})", res.tail(2000)
        return self.wait_drained(ctx, timeout)

    def wait_drained(self, ctx: NodeCtx, timeout: float) -> tuple[bool, str, str]:
        """Until no job runs on the node (DRAINED), at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        delay = FIRST_POLL_S
        while True:
            state = self.read_state(ctx)
            if state == "cordoned":
                return True, "", ""
            if state == "schedulable":
                return False, "the node was resumed by someone else while it drained; it is not upgraded", ""
            left = deadline - time.monotonic()
            if left <= 0:
                what = "still DRAINING: jobs are running on it" if state == "draining" else f"in state {state}"
                return False, (f"not drained within drain_timeout ({timeout:g}s): {what}; it is not upgraded or "
                               "rebooted under them"), ""
            time.sleep(min(delay, left))
            delay = min(delay * 2, MAX_POLL_S)

    def uncordon(self, ctx: NodeCtx, name: str) -> tuple[bool, str]:
        res = self._step(ctx, name, ["update", f"NodeName={ctx.node}", "State=RESUME"], once=True,
                         probe=lambda c, m: self.read_state(c) == "schedulable")
        return res.ok, "" if res.ok else f"uncordon failed (rc {res.rc}): {res.tail(200)}"

    def label(self, ctx: NodeCtx, name: str, key: str, value: str) -> tuple[bool, str]:
        # Slurm keeps no free-form node labels; a drained node's Reason carries the mark
        return True, f"slurm has no node labels ({key}={value} is in the journal)"

    def quarantine(self, ctx: NodeCtx, label: str) -> tuple[bool, str]:
        reason = f"k3rollout quarantine {ctx.run_id}"
        res = self._step(ctx, "quarantine-1", ["update", f"NodeName={ctx.node}", "State=DRAIN", f"Reason={reason}"],
                         once=True, probe=self._drain_set)
        if not res.ok:
            return False, f"could not quarantine (rc {res.rc}): {res.tail(200)}"
        if self.read_state(ctx) == "schedulable":
            return False, "node is schedulable after quarantine"
        return True, f"quarantined: DRAIN with Reason={reason!r}"

    def describe_quarantine(self, label: str) -> str:
        return "scontrol update State=DRAIN Reason='k3rollout quarantine <run id>'"
