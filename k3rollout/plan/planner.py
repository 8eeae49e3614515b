"""Turn a playbook and an inventory into a plan: batches, capacity, durations, window fit.

``make_plan`` is pure: the window is passed in as seconds remaining, never read from a
clock, and no host is contacted. The engine records the plan in the journal and follows it.

Rules encoded here:
- Batches follow Ansible ``serial`` (see ``serial.py``); a batch that would take more
  nodes out of service than ``min_serving`` allows is split into consecutive batches that
  do not, and the plan marks them ``capped_by_capacity``.
- A batch "fits" the window only if it can finish *or* roll back before the window ends:
  its estimate plus the rollback estimate must fit in the time left after the batches
  before it: no batch starts that the plan cannot finish or roll back.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from k3rollout.errors import InputError
from k3rollout.model.backends import backend_keys
from k3rollout.model.inventory import Inventory, declared_out_of_service
from k3rollout.model.playbook import ROLLBACK_UNDOES, STAGE_TABLES, Playbook
from k3rollout.model.stagekinds import RECORDS_BASELINE, TAKES_OUT_OF_SERVICE
from k3rollout.plan import timing as tm
from k3rollout.plan.approval import inventory_digest
from k3rollout.plan.replicas import plan_replicas
from k3rollout.plan.serial import pct_to_int, serial_batches
from k3rollout.plan.target import declared_driver, unchanged_hosts


@dataclass
class BatchPlan:
    index: int
    nodes: list[str]
    estimate_s: float
    rollback_estimate_s: float
    start_offset_s: float
    end_offset_s: float
    serving_before: int
    serving_during: int
    serving_floor: int
    capped_by_capacity: bool
    fits_window: bool | None
    rollback_plan: list[dict[str, Any]] = field(default_factory=list)
    replicas: list[str] = field(default_factory=list)     # the serving groups this batch takes (group_by)


@dataclass
class Plan:
    play: str
    playbook: str
    playbook_sha256: str
    inventory: str
    hosts: list[str]
    serial: list[Any]
    max_fail_percentage: float
    min_serving: int
    forks: int
    stages: list[dict[str, Any]]
    batches: list[BatchPlan]
    window_s: float | None
    total_estimate_s: float
    fits_window: bool | None
    in_place_change: bool
    notes: list[str] = field(default_factory=list)
    unit: str = "node"                  # what serial, min_serving and serving_* count: node or replica
    groups: dict[str, list[str]] = field(default_factory=dict)   # replica -> its nodes (group_by)
    inventory_sha256: str = ""          # the inventory's content (plan/approval.py inventory_digest)
    # estimates and their sources, each unit's time out of service, makespan of serial batches and
    # of a sliding window beside the lower bound at the floor (plan/timing.py)
    timing: dict[str, Any] = field(default_factory=dict)
    # the sliding window (engine/window.py), when the play has `window:`: its batch and limits
    policy: dict[str, Any] = field(default_factory=dict)
    # with a model profile: each replica's nodes, layout, GPU memory and whether it holds the model
    replicas: list[dict[str, Any]] = field(default_factory=list)
    profile: dict[str, Any] = field(default_factory=dict)
    # node -> why the play will not change it (plan/target.py): baseline only, no rollback
    no_change: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Plan:
        d = dict(d)
        d["batches"] = [BatchPlan(**b) for b in d["batches"]]
        return cls(**d)


def min_serving_count(value: int | str, total: int) -> int:
    """A capacity floor rounds *up*: 75% of 10 nodes keeps 8 serving, not 7."""
    if isinstance(value, str) and value.strip().endswith("%"):
        return math.ceil(int(value.strip()[:-1]) * total / 100.0)
    return int(value)


def out_of_service_before(inventory: Inventory, hosts: list[str]) -> list[str]:
    """The hosts known, before the run, to serve nothing: the capacity floor counts them as
    out already. ``make_plan`` contacts no host, so this is what the inventory says:

    - ``serving: false`` on a host: the operator's word that it is out of service (cordoned,
      drained, down for repair);
    - a host of a registered transport (the simulator's, ``ansible_connection: k3sim``): its
      scheduler state as the transport builds it from its host vars, i.e. what a preflight
      would read (``TransportPlugin.out_of_service``, k3rollout/plugins.py).

    At run time each node's baseline records its scheduler state, and the engine counts
    that too before every batch (``BatchPolicy.out_of_service``, engine/policy.py)."""
    return [h for h in hosts if declared_out_of_service(inventory.hosts[h].vars)]


def rollback_steps_preview(playbook: Playbook, host_vars: dict[str, Any]) -> list[str]:
    """What the plan will record for a node, before baseline has read the real versions:
    each action once, in the order the rollback runs them (``Playbook.rollback_actions``),
    in the words of the stage kind that declares it (its ``Undo``, model/playbook.py)."""
    before = declared_driver(host_vars)
    expected = f"{before}" if before else "the version baseline records"
    backends = backend_keys(host_vars)
    # under on_node_failure: quarantine, an action is replaced by the one the stage kind
    # declares for it (a failed node kept cordoned and marked, not uncordoned)
    instead = {u.instead_of_under_quarantine: u for u in STAGE_TABLES.undos.values() if u.instead_of_under_quarantine} \
        if playbook.play.on_node_failure == "quarantine" else {}
    return [instead.get(rb.action, STAGE_TABLES.undos[rb.action]).plan_line(rb.reboot, expected, backends)
            for rb in playbook.rollback_actions()]


def rollback_estimate(playbook: Playbook) -> float:
    if playbook.play.rollback_estimate is not None:
        return playbook.play.rollback_estimate
    by_kind: dict[str, float] = {s.stage: s.estimate_s for s in playbook.stages}
    # each action runs once per node however many stages declare it, for as long as its
    # kind declares (None: as long as the stage it undoes)
    undos = [(STAGE_TABLES.undos[rb.action], ROLLBACK_UNDOES[rb.action]) for rb in playbook.rollback_actions()]
    return sum(by_kind.get(stage, 0.0) if u.estimate_s is None else u.estimate_s for u, stage in undos)


def _estimates(playbook: Playbook, in_place: bool) -> tuple[float, float]:
    """(one node's time through all stages, the rollback reserve); baseline only without change."""
    if not in_place:
        return next(s.estimate_s for s in playbook.stages if STAGE_TABLES.plays(s.stage, RECORDS_BASELINE)), 0.0
    return sum(s.estimate_s for s in playbook.stages), rollback_estimate(playbook)


def _batch_estimate(nodes: list[str], forks: int, per_node: float, node_total: dict[str, float] | None) -> float:
    """A batch takes one node's stages per wave of ``forks`` nodes; with durations per node
    (history by hardware class) each wave takes its slowest node."""
    if node_total is None:
        return per_node * math.ceil(len(nodes) / forks)
    return sum(max(node_total[n] for n in nodes[i:i + forks]) for i in range(0, len(nodes), forks))


def _timing(playbook: Playbook, inventory: Inventory, hosts: list[str], units: dict[str, list[str]],
            disruptive: bool, max_out: int, history: tm.History | None
            ) -> tuple[dict[str, Any], dict[str, float] | None]:
    """The plan's ``timing`` section, and each node's total when history changed it."""
    play = playbook.play
    stages: list[dict[str, Any]] = [{"stage": s.stage, "estimate_s": s.estimate_s} for s in playbook.stages]
    kinds: list[str] = [s.stage for s in playbook.stages]
    node_class = {h: tm.hardware_class(inventory.hosts[h].vars) for h in hosts}
    rows = tm.stage_table(stages, node_class.values(), history)
    dur = tm.duration_fn(rows, node_class)
    if not disruptive and not play.vars.get("allow_in_place_change", True):
        kinds = [k for k in kinds if STAGE_TABLES.plays(k, RECORDS_BASELINE)]
    ut = tm.unit_times(units, kinds, dur, disruptive)
    # units out at once: the floor's allowance, and no more nodes than forks at a time
    k = max(1, min(max_out, play.forks // max(len(v) for v in units.values())))
    serial = list(play.serial)
    canary = [len(b) for b in serial_batches(list(units), serial)[:max(0, len(serial) - 1)]]
    out = tm.summary(ut, 0.0, tm.window_makespan(ut, canary, k), k, canary)
    out.update(stages=rows, history_runs=list(history.runs) if history else [], canary=canary,
               estimate_basis="p90 of earlier runs where history has samples, else the playbook's estimate"
               if history else "the playbook's estimates")
    node_total: dict[str, float] | None = None
    if history is not None:
        node_total = {h: float(sum(dur(h, kk) for kk in kinds)) for h in hosts}
    return out, node_total


def _window_policy(play: Any, total: int, max_out: int, per_node: float, rb_est: float,
                   node_total: dict[str, float] | None, batch: int) -> dict[str, Any]:
    w = play.window
    want = pct_to_int(w.max_unavailable, total) if isinstance(w.max_unavailable, str) else int(w.max_unavailable)
    k = max(1, min(want, max_out, play.forks))
    unit = max(node_total.values()) if node_total else per_node
    return {"name": "window", "batch": batch, "max_unavailable": k, "fail_window": w.fail_window,
            "cutoff_s": w.cutoff, "unit_estimate_s": unit, "rollback_estimate_s": rb_est}


def _prestage(playbook: Playbook, hosts: list[str], in_place: bool, timing: dict[str, Any], notes: list[str]) -> float:
    """Pre-staging runs before batch 1 (engine/prestage.py): the batches start that much later."""
    pre = playbook.play.prestage
    if pre is None or not in_place:
        return 0.0
    ahead = pre.estimate * math.ceil(len(hosts) / pre.parallel)
    timing["prestage"] = {"nodes": len(hosts), "parallel": pre.parallel, "estimate_s": pre.estimate, "ahead_s": ahead}
    notes.append(f"pre-staging first: {len(hosts)} node(s), {pre.parallel} at a time while they still serve "
                 f"(driver packages downloaded, image pulled by digest, weights manifest and disk space checked), "
                 f"about {ahead / 60:.0f} min before batch 1")
    return ahead


def make_plan(playbook: Playbook, inventory: Inventory, *, window_s: float | None = None,
              history: tm.History | None = None, facts: dict[str, dict[str, Any]] | None = None) -> Plan:
    plan = _make_plan(playbook, inventory, window_s=window_s, history=history, facts=facts)
    if not plan.in_place_change:
        return plan
    unchanged = unchanged_hosts(playbook, plan.hosts, {h: inventory.hosts[h].vars for h in plan.hosts})
    if unchanged:
        # the run reads their baseline and leaves them in service: nothing to roll back
        plan.no_change = unchanged
        for b in plan.batches:
            for rp in b.rollback_plan:
                if rp["node"] in unchanged:
                    rp["steps"] = [f"none: {unchanged[rp['node']]}; baseline only, the node stays in service"]
        plan.notes.append(f"{len(unchanged)} node(s) the play will not change (baseline only, no rollback, never "
                          "a reason to stop the run): " + "; ".join(f"{h}: {why}" for h, why in unchanged.items()))
        for rid, members in plan.groups.items():
            mixed = [m for m in members if m in unchanged]
            if mixed and len(mixed) < len(members):
                plan.notes.append(f"replica {rid} mixes nodes the play changes with {', '.join(mixed)}, which it "
                                  "does not: the replica cannot serve on two drivers, so it fails at its serving "
                                  "stage and its changed nodes are rolled back; align its drivers first")
    return plan


def _make_plan(playbook: Playbook, inventory: Inventory, *, window_s: float | None = None,
               history: tm.History | None = None, facts: dict[str, dict[str, Any]] | None = None) -> Plan:
    play = playbook.play
    pattern = play.host_pattern()
    hosts = inventory.select(pattern)
    if not hosts:
        named = sorted(g for g in inventory.groups if g not in ("all", "ungrouped"))
        shown = f"{pattern!r} (from {play.hosts!r})" if pattern != play.hosts else repr(pattern)
        raise InputError(f"hosts pattern {shown} matches no host in the inventory; its groups are "
                         f"{', '.join(named) or '(none)'}. Name the GPU nodes' group in the play's `hosts:` "
                         "(the shipped playbook takes it from -e k3_hosts=GROUP)", path=inventory.path)
    total = len(hosts)
    floor = min_serving_count(play.min_serving, total)
    if floor > total:
        raise InputError(f"min_serving {play.min_serving!r} asks for {floor} serving nodes but the play has {total}",
                         path=playbook.path)
    in_place = bool(play.vars.get("allow_in_place_change", True))
    not_serving = out_of_service_before(inventory, hosts)
    if playbook.profile is not None:
        replicas, rnotes = plan_replicas(playbook.profile, hosts, inventory, play.group_by or "serving_group",
                                         facts=facts)
        groups = {r["id"]: r["nodes"] for r in replicas}
        plan = _replica_plan(playbook, inventory, hosts, groups, not_serving, window_s, in_place, history,
                             how=f"by model profile {playbook.profile.name}")
        plan.notes[1:1] = rnotes
        plan.replicas, plan.profile = replicas, playbook.profile.summary()
        return plan
    groups = serving_groups(play.group_by, hosts, inventory) if play.group_by else {}
    if groups:
        return _replica_plan(playbook, inventory, hosts, groups, not_serving, window_s, in_place, history)
    serving = total - len(not_serving)
    notes: list[str] = []
    if not_serving:
        notes.append(f"{len(not_serving)} node(s) already out of service per inventory: {', '.join(not_serving)}")
    stages = [{"name": s.name, "stage": s.stage, "estimate_s": s.estimate_s} for s in playbook.stages]

    raw = serial_batches(hosts, play.serial)
    max_out = serving - floor
    cordons = STAGE_TABLES.index([s.stage for s in playbook.stages], TAKES_OUT_OF_SERVICE) is not None
    batches_nodes: list[tuple[list[str], bool]] = []
    window_idx: int | None = None
    if cordons and in_place:
        if max_out < 1:
            raise InputError(
                f"min_serving {play.min_serving!r} keeps {floor} of {serving} serving nodes in service: "
                "no node can be taken out. Lower min_serving or add capacity.", path=playbook.path)
        n_canary = len(play.serial) - 1 if play.window is not None else len(raw)
        for b in raw[:n_canary]:
            batches_nodes += split_by_floor(b, set(not_serving), max_out)
        rest = [h for b in raw[n_canary:] for h in b]
        if rest:
            # the sliding window (engine/window.py): one batch after the canaries, at most k in flight
            batches_nodes.append((rest, False))
            window_idx = len(batches_nodes)
    else:
        batches_nodes = [(b, False) for b in raw]
    if not in_place:
        notes.append("allow_in_place_change is false: the run captures baseline evidence only and ends "
                     "'no_change'; move validation to an isolated compatible environment")

    per_node, rb_est = _estimates(playbook, in_place)
    timing, node_total = _timing(playbook, inventory, hosts, {h: [h] for h in hosts}, cordons and in_place,
                                 max_out, history)
    offset = _prestage(playbook, hosts, in_place, timing, notes)
    batches: list[BatchPlan] = []
    policy: dict[str, Any] = {}
    if play.window is not None and window_idx is not None:
        policy = _window_policy(play, len(hosts), max_out, per_node, rb_est, node_total, window_idx)
        notes.append(f"sliding window after {window_idx - 1} canary batch(es): batch {window_idx} "
                     f"keeps up to {policy['max_unavailable']} node(s) in flight, starting one as another finishes; "
                     f"no node starts once more than {play.max_fail_percentage:g}% of the last "
                     f"{policy['fail_window']} started have failed, or that cannot finish or roll back "
                     "before the window ends" + (f" less {play.window.cutoff / 60:.0f} min" if play.window.cutoff
                                                 else ""))
    for i, (nodes, capped) in enumerate(batches_nodes, start=1):
        est = _batch_estimate(nodes, play.forks, per_node, node_total)
        if policy and i == policy["batch"]:
            k = policy["max_unavailable"]
            est = tm.window_makespan([u for u in timing["units"] if u["unit"] in set(nodes)], [], k) \
                if node_total is not None else per_node * math.ceil(len(nodes) / k)
        out = len([n for n in nodes if n not in not_serving]) if (cordons and in_place) else 0
        if policy and i == policy["batch"]:
            out = min(out, policy["max_unavailable"])
        fits = None
        if window_s is not None:
            fits = offset + est + rb_est <= window_s
            if policy and i == policy["batch"]:
                # a window batch is not all or nothing: a node starts while it can finish or roll back
                # before the cut-off
                k, unit = policy["max_unavailable"], policy["unit_estimate_s"]
                room = window_s - offset - unit - rb_est - policy["cutoff_s"]
                can = 0 if room < 0 else min(len(nodes), k * (int(room // unit) + 1) if unit > 0 else len(nodes))
                fits = can == len(nodes)
                if not fits:
                    notes.append(f"window batch {i}: {can} of {len(nodes)} node(s) can start before the cut-off; "
                                 "the rest stay pending")
        batches.append(BatchPlan(
            index=i, nodes=list(nodes), estimate_s=est, rollback_estimate_s=rb_est,
            start_offset_s=offset, end_offset_s=offset + est, serving_before=serving,
            serving_during=serving - out, serving_floor=floor, capped_by_capacity=capped,
            fits_window=fits,
            rollback_plan=[{"node": n, "steps": rollback_steps_preview(playbook, inventory.hosts[n].vars)}
                           for n in nodes] if in_place else [],
        ))
        offset += est
    timing["serial_makespan_s"] = offset - timing.get("prestage", {}).get("ahead_s", 0.0)
    if policy:
        # what this plan's window batch takes, and what serial batches would have taken instead
        timing["window_makespan_s"] = timing["serial_makespan_s"]
        timing["serial_makespan_s"] = sum(
            _batch_estimate(p, play.forks, per_node, node_total)
            for b in raw for p, _ in split_by_floor(b, set(not_serving), max_out))
    fits_all = None if window_s is None else all(b.fits_window for b in batches)
    if window_s is not None and not fits_all and not (policy and all(b.fits_window for b in batches[:-1])):
        n_fit = sum(1 for b in batches if b.fits_window)
        notes.append(f"only {n_fit} of {len(batches)} batch(es) fit the window; the run stops before the first "
                     "that does not and leaves its nodes pending")
    return Plan(
        play=play.name, playbook=playbook.path, playbook_sha256=playbook.sha256, inventory=inventory.path,
        inventory_sha256=inventory_digest(inventory),
        hosts=hosts, serial=list(play.serial), max_fail_percentage=play.max_fail_percentage,
        min_serving=floor, forks=play.forks, stages=stages, batches=batches, window_s=window_s,
        total_estimate_s=offset, fits_window=fits_all, in_place_change=in_place, notes=notes, timing=timing,
        policy=policy,
    )


def split_by_floor(units: list[str], already_out: set[str], max_out: int) -> list[tuple[list[str], bool]]:
    """Split one serial batch (nodes or replicas) into consecutive batches that each take at
    most ``max_out`` serving units out; (units, was split) per batch."""
    parts: list[list[str]] = [[]]
    out = 0
    for u in units:
        cost = 0 if u in already_out else 1
        if out + cost > max_out:
            parts.append([])
            out = 0
        parts[-1].append(u)
        out += cost
    return [(p, len(parts) > 1) for p in parts]


def serving_groups(var: str, hosts: list[str], inventory: Inventory) -> dict[str, list[str]]:
    """Replica -> its nodes, in inventory order; a host without ``var`` is a replica of one."""
    groups: dict[str, list[str]] = {}
    for h in hosts:
        key = inventory.hosts[h].vars.get(var)
        if key is not None and not isinstance(key, (str, int)):
            o = inventory.hosts[h].var_origins.get(var, inventory.hosts[h].origin)
            raise InputError(f"host {h}: {var} must be a name or number, got {key!r}", path=o.path, line=o.line)
        groups.setdefault(str(key) if key is not None else h, []).append(h)
    return groups


def _replica_plan(playbook: Playbook, inventory: Inventory, hosts: list[str], groups: dict[str, list[str]],
                  not_serving: list[str], window_s: float | None, in_place: bool,
                  history: tm.History | None = None, how: str | None = None) -> Plan:
    """Batches of whole serving groups; serial, min_serving and capacity count replicas."""
    play = playbook.play
    names = list(groups)
    down = {g for g, ns in groups.items() if any(n in not_serving for n in ns)}
    floor = min_serving_count(play.min_serving, len(names))
    serving = len(names) - len(down)
    notes = [f"{len(hosts)} nodes in {len(names)} serving group(s) {how or f'by `{play.group_by}`'}; serial, "
             "min_serving, max_fail_percentage and capacity count replicas (a replica serves only when all its "
             "nodes do)"]
    if down:
        notes.append(f"{len(down)} replica(s) already out of service per inventory: {', '.join(sorted(down))}")
    if floor > len(names):
        raise InputError(f"min_serving {play.min_serving!r} asks for {floor} serving replicas but the play has "
                         f"{len(names)}", path=playbook.path)
    cordons = STAGE_TABLES.index([s.stage for s in playbook.stages], TAKES_OUT_OF_SERVICE) is not None
    max_out = serving - floor
    if cordons and in_place and max_out < 1:
        raise InputError(f"min_serving {play.min_serving!r} keeps {floor} of {serving} serving replicas in service: "
                         "no replica can be taken out. Lower min_serving or add capacity.", path=playbook.path)
    chunks: list[tuple[list[str], bool]] = []
    for b in serial_batches(names, play.serial):
        chunks += split_by_floor(b, down, max_out) if (cordons and in_place) else [(b, False)]
    per_node, rb_est = _estimates(playbook, in_place)
    timing, node_total = _timing(playbook, inventory, hosts, groups, cordons and in_place, max_out, history)
    offset = _prestage(playbook, hosts, in_place, timing, notes)
    batches: list[BatchPlan] = []
    for i, (reps, capped) in enumerate(chunks, start=1):
        nodes = [n for g in reps for n in groups[g]]
        est = _batch_estimate(nodes, play.forks, per_node, node_total)
        out = len([g for g in reps if g not in down]) if (cordons and in_place) else 0
        fits = None if window_s is None else offset + est + rb_est <= window_s
        batches.append(BatchPlan(
            index=i, nodes=nodes, estimate_s=est, rollback_estimate_s=rb_est, start_offset_s=offset,
            end_offset_s=offset + est, serving_before=serving, serving_during=serving - out, serving_floor=floor,
            capped_by_capacity=capped, fits_window=fits, replicas=list(reps),
            rollback_plan=[{"node": n, "steps": rollback_steps_preview(playbook, inventory.hosts[n].vars)}
                           for n in nodes] if in_place else []))
        offset += est
    timing["serial_makespan_s"] = offset - timing.get("prestage", {}).get("ahead_s", 0.0)
    fits_all = None if window_s is None else all(b.fits_window for b in batches)
    if window_s is not None and not fits_all:
        notes.append(f"only {sum(1 for b in batches if b.fits_window)} of {len(batches)} batch(es) fit the window")
    return Plan(play=play.name, playbook=playbook.path, playbook_sha256=playbook.sha256, inventory=inventory.path,
                inventory_sha256=inventory_digest(inventory),
                hosts=hosts, serial=list(play.serial), max_fail_percentage=play.max_fail_percentage, min_serving=floor,
                forks=play.forks, stages=[{"name": s.name, "stage": s.stage, "estimate_s": s.estimate_s}
                                          for s in playbook.stages],
                batches=batches, window_s=window_s, total_estimate_s=offset, fits_window=fits_all,
                in_place_change=in_place, notes=notes, unit="replica", groups=groups, timing=timing)
