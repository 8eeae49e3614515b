"""A run on disk: create or reopen a run directory, take the cluster lock, drive the engine.

The run directory's layout, how an existing one is opened and verified, and its lock are
``RunDir``'s (runlog/rundir.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from k3rollout import fastjson
from k3rollout.engine.clock import Clock
from k3rollout.engine.runner import Engine
from k3rollout.errors import InputError, hard_stopping
from k3rollout.evidence.store import EvidenceStore
from k3rollout.model.inputs import inventory_inputs, write_retry_file
from k3rollout.model.inventory import Inventory
from k3rollout.model.playbook import Playbook
from k3rollout.plan.approval import input_changes, inventory_digest, plan_digest
from k3rollout.plan.planner import Plan
from k3rollout.report.render import write_reports
from k3rollout.runlog.journal import Journal
from k3rollout.runlog.lock import RunLock
from k3rollout.runlog.rundir import PREFLIGHT_JSON, RunDir
from k3rollout.scheduler import with_scheduler_hosts
from k3rollout.scheduler.cluster_lock import ClusterLocks, cluster_locks, lock_hosts
from k3rollout.scheduler.k8s_lock import ClusterLeases, Locks, lease_targets
from k3rollout.transport.factory import check_controller_tools, make_executor


def new_run_id(clock: Clock) -> str:
    return clock.iso().replace(":", "").replace("-", "")[:15] + "-" + uuid.uuid4().hex[:6]


def in_cluster_locks(inventory: Inventory, hosts: list[str], executor: Any, run_dir: Path, started: str,
                     run_id: str) -> tuple[ClusterLeases, ClusterLocks]:
    """Take the cluster's own locks (a Lease on Kubernetes, a reservation on Slurm, a lock
    directory on a host of a ``scheduler: none`` cluster): all of them, or none (LockHeld)."""
    leases = ClusterLeases(lease_targets({h: inventory.hosts[h] for h in hosts}, inventory.path, executor),
                           str(run_dir.resolve()))
    leases.acquire()
    try:
        others = cluster_locks(inventory, hosts, executor, str(run_dir.resolve()), started, run_id)
        others.acquire()
    except BaseException:
        leases.release()
        raise
    return leases, others


def executor_hosts(inventory: Inventory, hosts: list[str]) -> dict[str, Any]:
    """The run's hosts, the scheduler hosts they name and the host of their cluster lock."""
    return with_scheduler_hosts(inventory.hosts, [*hosts, *(h for h in lock_hosts(inventory, hosts)
                                                            if h not in hosts)])


# the records after which report.html and the others are written again while the run goes
REPORT_AFTER = frozenset({"batch_done", "batch_rolled_back"})
# a batch's end writes the reports unless the last write is too recent: at most one part in
# REPORT_BUDGET of the run's CPU goes to them (a 1,000-node report takes ~2 s to render; real
# batches take many minutes, so there every batch gets one; bench/live.py measures it)
REPORT_BUDGET = 50


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


class Session:
    def __init__(self, run_dir: Path, clock: Clock | None = None):
        self.run_dir = Path(run_dir)
        self.rd = RunDir(self.run_dir)
        self.clock = clock or Clock()
        self._running: Engine | None = None      # the engine whose batches end with a report
        self._next_report = 0.0                   # process CPU time before which no interim report is written

    def _reporting(self, on_event: Callable[[dict[str, Any]], None] | None) -> Callable[[dict[str, Any]], None]:
        """``on_event`` that also writes the reports at each batch's end (``write_interim``)."""
        def each(rec: dict[str, Any]) -> None:
            if on_event is not None:
                on_event(rec)
            if rec["type"] in REPORT_AFTER and self._running is not None:
                self.write_interim(self._running)
        return each

    def write_interim(self, engine: Engine) -> None:
        """The reports as the run stands, marked in progress with the time they were written,
        so report.html can be opened during the window (``REPORT_BUDGET`` bounds what they cost
        the run when batches are short). A report that cannot be written now
        is logged and the run goes on: the reports are written again at the next batch's end
        and at the run's end."""
        t = time.process_time()
        if t < self._next_report:
            return
        try:
            write_reports(self.run_dir, view=engine.view, records=engine.applied, in_progress=self.clock.iso())
            took = time.process_time() - t
            self._next_report = t + took + REPORT_BUDGET * took
        except Exception as exc:  # noqa: BLE001 - a view of the run never stops the run; logged to events.jsonl
            engine.log.error("interim_report_failed", error=f"{type(exc).__name__}: {exc}")

    @property
    def journal_path(self) -> Path:
        return self.rd.journal

    def start(self, playbook: Playbook, inventory: Inventory, plan: Plan, window_end: float | None,
              on_event: Callable[[dict[str, Any]], None] | None = None, log: Any = None,
              approved_plan: str | None = None, overrides: dict[str, Any] | None = None,
              preflight: dict[str, Any] | None = None) -> str:
        if self.journal_path.exists() and self.journal_path.stat().st_size > 0:
            raise InputError(f"run directory already holds a run; use `k3rollout resume {self.run_dir}` or pick "
                             "another --run-dir", path=str(self.run_dir))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        run_id = new_run_id(self.clock)
        check_controller_tools(playbook, {h: inventory.hosts[h] for h in plan.hosts})
        file_lock = self.rd.lock(inventory, self.clock.iso(), hosts=plan.hosts)
        lock: RunLock | Locks = file_lock
        # the (empty) journal exists before the lock is taken: a run killed before its first
        # record leaves a run directory `resume` recognises, and releases (see resume)
        created = not self.journal_path.exists()
        self.journal_path.touch()
        try:
            file_lock.acquire()
        except BaseException:
            if created and self.journal_path.stat().st_size == 0:
                self.journal_path.unlink()
            raise
        try:
            executor = make_executor(executor_hosts(inventory, list(plan.hosts)), self.run_dir)
            # the cluster's own lock (a Lease on Kubernetes, a reservation on Slurm, a lock
            # directory on a cluster host), before anything is written
            try:
                leases, others = in_cluster_locks(inventory, list(plan.hosts), executor, self.run_dir,
                                                  self.clock.iso(), run_id)
            except BaseException:
                executor.close()
                if created and self.journal_path.stat().st_size == 0:
                    self.journal_path.unlink()      # as for a refused file lock: no run happened here
                raise
            lock = Locks(lock, leases, others)
            inv_digest = inventory.sha256 or hashlib.sha256(Path(inventory.path).read_bytes()).hexdigest()
            _write_json(self.rd.inputs, {
                "playbook": str(Path(playbook.path).resolve()), "playbook_sha256": playbook.sha256,
                "inventory": str(Path(inventory.path).resolve()), "inventory_sha256": inv_digest,
                **inventory_inputs(inventory, overrides)})
            journal = Journal(self.journal_path, self.clock.iso)
            evidence = EvidenceStore(self.rd.evidence)
            engine = Engine(playbook=playbook, inventory=inventory, executor=executor, journal=journal,
                            evidence=evidence, clock=self.clock, run_id=run_id, log=log,
                            on_event=self._reporting(on_event))
            self._running = engine
            # the approved playbook as evidence, with secret values masked (its sha256 in
            # run_started is of the original file)
            ref = evidence.write("_run", "inputs", Path(playbook.path).name,
                                 engine.redact(Path(playbook.path).read_text(encoding="utf-8")))

            pre = None
            if preflight is not None:
                # the preflight before the run: its report as evidence, its outcome (or that
                # it was not run) in run_started
                pre = {k: v for k, v in preflight.items() if k != "report"}
                if "report" in preflight:
                    pref = evidence.write("_run", "preflight", PREFLIGHT_JSON,
                                          engine.redact(fastjson.dumps_pretty(preflight["report"])))
                    pre.update(evidence=pref.path, evidence_sha256=pref.sha256)

            extra: dict[str, Any] = {"cluster_lock": leases.servers() + others.servers()} \
                if leases.held or others.held else {}
            if pre is not None:
                extra["preflight"] = pre
            engine.record("run_started", run_id=run_id, plan=plan.to_dict(), plan_sha256=plan_digest(plan.to_dict()),
                          approved_plan=approved_plan, playbook=str(playbook.path),
                          playbook_sha256=playbook.sha256, inventory=inventory.path, inventory_sha256=inv_digest,
                          window_end=window_end,
                          window_end_iso=self.clock.iso(window_end) if window_end is not None else None,
                          transport=executor.kind, pid=os.getpid(), host=socket.gethostname(),
                          playbook_evidence=ref.path,
                          playbook_evidence_sha256=ref.sha256,
                          **extra)
            try:
                return engine.run()
            finally:
                if not hard_stopping():         # a killed process leaves all of this undone
                    journal.close()
                    engine.close()
                    self.write_outputs(engine)
        finally:
            if not hard_stopping():
                lock.release()

    def reopen(self) -> tuple[Playbook, Inventory, Journal, dict[str, Any]]:
        # read and verified (hash chain, record types, evidence) before anything is repaired or
        # appended; a run that never started is released (RunNeverStarted)
        self.rd.open(release_unstarted=True)
        playbook, inventory, inputs = self.rd.reload_inputs()
        journal = Journal(self.journal_path, self.clock.iso)
        if not journal.records or journal.records[0]["type"] != "run_started":
            journal.close()
            raise InputError("journal does not start with run_started", path=str(self.journal_path))
        return playbook, inventory, journal, inputs

    def _engine(self, on_event: Callable[[dict[str, Any]], None] | None, log: Any,
                accept_changed: bool = False) -> tuple[Engine, Journal, Locks]:
        playbook, inventory, journal, inputs = self.reopen()
        first = journal.records[0]
        plan_hosts = first["plan"]["hosts"]
        missing = [h for h in plan_hosts if h not in inventory.hosts]
        if missing:
            journal.close()
            raise InputError(f"host(s) {missing} of this run are no longer in the inventory", path=inventory.path)
        try:
            check_controller_tools(playbook, {h: inventory.hosts[h] for h in plan_hosts})
        except Exception:
            journal.close()
            raise
        # --- changed inputs: refused unless the operator accepts them (then journaled) ---

        digest = inventory.sha256 or hashlib.sha256(Path(inventory.path).read_bytes()).hexdigest()
        changes = input_changes(journal.records, playbook_sha256=playbook.sha256, inventory_sha256=digest,
                                inventory_content_sha256=inventory_digest(inventory))
        if changes and not accept_changed:
            journal.close()
            which = ", ".join(f"{k} (was {a[:12]}, now {b[:12]})" for k, (a, b) in changes.items())
            raise InputError(f"the run's inputs changed since it started: {which}. A run continues with the "
                             "playbook and inventory it was approved with; to go on with the changed ones, add "
                             "--accept-changed-inputs (the change is recorded in the journal)",
                             path=inputs["playbook"] if "playbook_sha256" in changes else inventory.path)
        # --- end changed inputs ---
        file_lock = self.rd.lock(inventory, self.clock.iso(), hosts=plan_hosts)
        lock: RunLock | Locks = file_lock
        try:
            file_lock.acquire(takeover_own_stale=True)
        except Exception:
            journal.close()
            raise
        executor = make_executor(executor_hosts(inventory, list(plan_hosts)), self.run_dir)
        try:
            leases, others = in_cluster_locks(inventory, list(plan_hosts), executor, self.run_dir, self.clock.iso(),
                                              first["run_id"])
        except Exception:
            executor.close()
            lock.release()
            journal.close()
            raise
        lock = Locks(lock, leases, others)
        engine = Engine(playbook=playbook, inventory=inventory, executor=executor, journal=journal,
                        evidence=EvidenceStore(self.rd.evidence), clock=self.clock, run_id=first["run_id"],
                        log=log, on_event=self._reporting(on_event))
        self._running = engine
        if changes:
            # accepted by the operator: on record, and the digests later resumes compare against
            now: dict[str, Any] = {k: b for k, (a, b) in changes.items()}
            engine.record("inputs_changed", accepted=True, playbook=playbook.path, inventory=inventory.path,
                          changes={k: {"was": a, "now": b} for k, (a, b) in changes.items()},
                          **now)
        return engine, journal, lock

    def resume(self, on_event: Callable[[dict[str, Any]], None] | None = None, log: Any = None,
               accept_changed: bool = False) -> str:
        engine, journal, lock = self._engine(on_event, log, accept_changed)
        try:
            pending = engine.rollbacks.pending_operator_rollback()
            if pending is not None:
                # an operator's rollback was interrupted: finish it, batch by batch as planned
                ok = engine.rollbacks.rollback_batches(pending, resumed=True)
                return "rolled_back" if ok else "rollback_failed"
            if engine.view.status != "running":
                return engine.view.status
            engine.record("run_resumed", pid=os.getpid(), host=socket.gethostname())
            return engine.run()
        finally:
            self._end(engine, journal, lock)

    def rollback(self, batch: int | None, on_event: Callable[[dict[str, Any]], None] | None = None, log: Any = None,
                 accept_changed: bool = False) -> bool:
        engine, journal, lock = self._engine(on_event, log, accept_changed)
        self.rollback_halt: str | None = None
        try:
            started = [i for i, b in sorted(engine.view.batches.items()) if b["status"] != "not_started"]
            if batch is not None:
                if batch not in engine.view.batches:
                    raise InputError(f"no batch {batch}; this run has batches 1..{len(engine.view.batches)}")
                targets = [batch]
            else:
                targets = list(reversed(started))
            if not targets:
                raise InputError("no batch of this run has started: nothing to roll back")
            ok = engine.rollbacks.rollback_batches(targets)
            self.rollback_halt = engine.rollbacks.halt_reason
            return ok
        finally:
            self._end(engine, journal, lock)

    def _end(self, engine: Engine, journal: Journal, lock: Locks) -> None:
        """The end of a resume or a rollback: the journal closed, the transports and the
        lock released, the reports written; a killed process (a HardStop unwinding) leaves
        all of it undone."""
        if hard_stopping():
            return
        journal.close()
        engine.close()
        lock.release()
        self.write_outputs(engine)

    def write_outputs(self, engine: Engine | None = None) -> dict[str, Any]:
        """result.json and the reports. After a run, from the engine's view of the journal
        when it holds every record (it is the journal folded record by record as each was
        appended, so re-reading 190,000 records at 1,000 nodes would only rebuild it); from
        the journal on disk otherwise."""
        if engine is not None:
            write_retry_file(self.rd.retry, engine.view)
        if engine is not None and engine.applied == engine.journal.last_seq:
            return write_reports(self.run_dir, view=engine.view, records=engine.applied)
        return write_reports(self.run_dir)
