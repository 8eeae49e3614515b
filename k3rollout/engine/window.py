"""The sliding-window batch policy (play key ``window:``), after the canary batches.

``serial`` makes batches barriers: a batch starts only once the slowest node of the one
before it, and its rollback, is done. With ``window: {max_unavailable: 4}`` the play's
``serial`` list gives the canary batches (its leading values; they run as barriers, as
before), and every node after them is one unit of a single sliding window: a node starts
as soon as another finishes, while

- at most ``max_unavailable`` (a count or a percentage of the play's nodes) are in flight,
  and taking one more out keeps the capacity floor (``min_serving``, counting every node
  already out of service: the same check a batch makes);
- the window cut-off holds: a node starts only if its estimate plus its rollback reserve
  plus ``cutoff`` (a margin, default none) fits in the time left;
- failures stay within ``max_fail_percentage``, applied to the last ``fail_window`` nodes
  started (default 10) once each of them has finished: when more than that percentage of
  them failed, no further node starts; those in flight finish (or roll back). A rollback
  that fails stops new starts at once. ``failure_budget`` stays rollout-wide, as before.

Each node runs through ``Engine.run_batch([node], idx)``: its stages, the batch-scoped
multinode stage on its own, and its rollback if it fails, all journaled as for a batch.
The window is one batch in the plan and the journal (``batch_started``/``batch_done``), so
``resume`` continues it: nodes already done are left alone, pending ones start again under
the same rules. Stage ``pause`` gates need a batch to wait in; a play with a window
refuses them (model/playbook.py).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from k3rollout.engine.states import NodeState

TERMINAL = {NodeState.UPGRADE_DONE.value, NodeState.SKIPPED.value, NodeState.ROLLED_BACK.value,
            NodeState.ROLLBACK_FAILED.value, NodeState.FAILED.value}
FAILED = {NodeState.ROLLED_BACK.value, NodeState.ROLLBACK_FAILED.value, NodeState.FAILED.value}


def _failing(engine: Any, started: list[str], last_n: int, pct: float) -> str | None:
    states = {n: engine.view.node(n).state for n in started}
    bad_rb = [n for n, s in states.items() if s == NodeState.ROLLBACK_FAILED.value]
    if bad_rb:
        return (f"ROLLBACK FAILED on {', '.join(bad_rb)}: node(s) kept cordoned and need hands-on recovery "
                "(see runbooks/ and the node's rollback evidence)")
    recent = started[-last_n:]
    done = [n for n in recent if states[n] in TERMINAL]
    failed = [n for n in done if states[n] in FAILED]
    if recent and 100.0 * len(failed) / len(recent) > pct:
        return (f"sliding window: {len(failed)} of the last {len(recent)} node(s) started failed "
                f"({100.0 * len(failed) / len(recent):.0f}%), above max_fail_percentage {pct:g}%: no further node starts")
    return None


def run(engine: Any, batch: dict[str, Any], policy: dict[str, Any]) -> tuple[str, str] | None:
    """Run the window batch; (halt kind, why) when new starts stopped early, else None."""
    idx, nodes = batch["index"], batch["nodes"]
    if engine.view.batches[idx]["status"] == "not_started":
        engine.record("batch_started", batch=idx, nodes=nodes)
        engine.log.info("batch_started", batch=idx, nodes=nodes, policy="window")
    k = max(1, int(policy["max_unavailable"]))
    need = float(policy["unit_estimate_s"]) + float(policy["rollback_estimate_s"]) + float(policy.get("cutoff_s") or 0)
    last_n = int(policy.get("fail_window") or 10)
    pct = engine.playbook.play.max_fail_percentage
    cond = threading.Condition()
    in_flight: set[str] = set()
    # the order nodes started in: earlier runs of this window (resume) first
    started = [n for n in nodes if engine.view.node(n).state != NodeState.PENDING.value]

    def one(node: str) -> None:
        try:
            engine.run_batch([node], idx)
        finally:
            with cond:
                in_flight.discard(node)
                cond.notify_all()

    todo = [n for n in nodes if engine.view.node(n).state not in TERMINAL]
    try:
        stop = _slide(engine, todo, k, need, last_n, pct, one, cond, in_flight, started)
    except KeyboardInterrupt:
        # as Engine.pool: no new step starts; what runs now finishes and is journaled
        engine.stopping.set()
        raise
    if engine.stopping.is_set():
        raise KeyboardInterrupt
    if stop is None:
        why = _failing(engine, started, last_n, pct)
        if why:
            stop = ("rollback_failed" if why.startswith("ROLLBACK FAILED") else "failure", why)
    failed = sorted(n for n in nodes if engine.view.node(n).state in FAILED)
    status = "failed" if failed else "passed"
    engine.record("batch_done", batch=idx, status=status, failed=failed)
    engine.log.info("batch_done", batch=idx, status=status, failed=failed, policy="window")
    engine.post_batch(idx, nodes, status, failed)
    return stop


def _slide(engine: Any, todo: list[str], k: int, need: float, last_n: int, pct: float, one: Any,
           cond: threading.Condition, in_flight: set[str], started: list[str]) -> tuple[str, str] | None:
    stop: tuple[str, str] | None = None
    with ThreadPoolExecutor(max_workers=k, thread_name_prefix="k3window") as ex:
        futures = []
        for node in todo:
            with cond:
                while stop is None and not engine.stopping.is_set():
                    why = _failing(engine, started, last_n, pct)
                    if why:
                        stop = ("rollback_failed" if why.startswith("ROLLBACK FAILED") else "failure", why)
                        break
                    over = engine.over_budget()
                    if over:
                        stop = ("failure_budget", over)
                        break
                    resuming = engine.view.node(node).state != NodeState.PENDING.value
                    if engine.view.window_end is not None and not resuming:
                        left = engine.view.window_end - engine.clock.now()
                        if need > left:
                            stop = ("window", f"sliding window: {node} needs {need / 60:.0f} min (with its rollback "
                                              f"and the cut-off margin) but the window has {max(0, left) / 60:.0f} "
                                              "min left; no further node starts")
                            break
                    if len(in_flight) < k:
                        short = None if resuming else engine.capacity_short([node], f"starting {node}",
                                                                           extra_out=set(in_flight))
                        if short is None:
                            break
                        if not in_flight:
                            stop = ("capacity", short)
                            break
                    cond.wait(0.5)
                if stop is not None or engine.stopping.is_set():
                    break
                in_flight.add(node)
                if node not in started:
                    started.append(node)
            futures.append(ex.submit(one, node))
        for f in futures:
            f.result()
    return stop
