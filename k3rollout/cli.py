"""The k3rollout command line: the one place exceptions become exit codes.

Exit codes: 0 success; 1 a rollout that halted or failed (or a lock held by another
run); 2 bad input (file:line in the message); 70 internal error, traceback in the run's
``debug.log``. argparse was chosen over click deliberately: it is in the standard
library and lets ``main(argv) -> int`` own every exit code, including usage errors (2).
"""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from k3rollout import __version__
from k3rollout.engine.clock import Clock, parse_iso
from k3rollout.errors import InputError, K3RolloutError
from k3rollout.model.durations import format_duration, parse_duration
from k3rollout.runlog.rundir import PREFLIGHT_JSON, PREFLIGHT_MD, RunDir

if TYPE_CHECKING:
    from k3rollout.model.ansible_inventory import VaultOptions
    from k3rollout.model.inventory import Inventory
    from k3rollout.model.playbook import Playbook
    from k3rollout.plan.planner import Plan

# Every other k3rollout import sits in the verb that uses it: `--help`, `triage`, `watch`
# and `report` start without loading the engine, the transports and every model, which
# takes about a second more.

EXIT_OK, EXIT_HALTED, EXIT_INPUT, EXIT_INTERNAL = 0, 1, 2, 70
EXIT_SIGPIPE = 141
EXIT_SIGINT = 130        # 128 + SIGINT: `watch` stopped by Ctrl-C


def default_paths() -> tuple[Path, Path]:
    from k3rollout.resources import shipped

    return shipped("playbooks", "k3-driver-rollout.yml"), shipped("inventories", "sim", "hosts.yml")


def _window_seconds(args: argparse.Namespace, clock: Clock) -> tuple[float | None, float | None]:
    """(seconds left, absolute end) from --window / --window-end."""
    if getattr(args, "window", None) and getattr(args, "window_end", None):
        raise InputError("give either --window or --window-end, not both")
    if getattr(args, "window", None):
        try:
            secs = parse_duration(args.window)
        except ValueError as exc:
            raise InputError(f"--window: {exc}") from None
        return secs, clock.now() + secs
    if getattr(args, "window_end", None):
        try:
            end = parse_iso(args.window_end)
        except ValueError as exc:
            raise InputError(f"--window-end: {exc}") from None
        left = end - clock.now()
        if left <= 0:
            raise InputError(f"--window-end {args.window_end} is in the past")
        return left, end
    return None, None


def _vault(args: argparse.Namespace) -> VaultOptions:
    from k3rollout.model.ansible_inventory import VaultOptions

    password = None
    if getattr(args, "ask_vault_pass", False):
        password = getpass.getpass("Vault password: ")
    return VaultOptions(password_files=list(getattr(args, "vault_password_file", None) or []), password=password)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    from k3rollout.model.inputs import parse_extra_vars

    if getattr(args, "start_at_task", None):
        raise InputError("--start-at-task: k3rollout does not start a run part way; a halted or interrupted run "
                         "continues exactly where it stopped with `k3rollout resume RUN_DIR`")
    out: dict[str, Any] = {}
    extra = parse_extra_vars(getattr(args, "extra_vars", None))
    if extra:
        out["extra_vars"] = extra
    if getattr(args, "forks", None) is not None:
        if args.forks < 1:
            raise InputError(f"--forks {args.forks}: must be at least 1")
        out["forks"] = args.forks
    return out


def _load_inputs(playbook_path: str, sources: list[str] | str,
                 args: argparse.Namespace) -> tuple[Playbook, Inventory, dict[str, Any]]:
    """(playbook, inventory, overrides) as ansible-playbook would see them: the inventory
    resolved like ``ansible-inventory`` (group_vars/ beside the playbook too), ``-e`` over
    every variable, ``-f`` as forks, ``--limit`` applied."""
    from k3rollout.model import load_inventory, load_playbook
    from k3rollout.model.inputs import apply_overrides

    overrides = _overrides(args)
    playbook = load_playbook(playbook_path)
    inventory = load_inventory(sources, playbook_dir=str(Path(playbook_path).resolve().parent), vault=_vault(args))
    playbook, inventory = apply_overrides(playbook, inventory, overrides)
    limit = getattr(args, "limit", None)
    if limit:
        inventory = inventory.limited(limit)
        overrides = {**overrides, "limit": limit, "limit_hosts": list(inventory.hosts)}
    verbosity = getattr(args, "verbose", 0) or 0
    if verbosity >= 1:
        how = "ansible-inventory" if inventory.resolver == "ansible" else "k3rollout's YAML reader (same result)"
        print(f"inventory: {len(inventory.hosts)} hosts from {', '.join(inventory.sources)}, resolved by {how}",
              file=sys.stderr)
    if verbosity >= 2 and overrides:
        print(f"overrides: {json.dumps(overrides, sort_keys=True, default=str)}", file=sys.stderr)
    if verbosity >= 3:
        for name, h in inventory.hosts.items():
            print(f"host {name}: groups {', '.join(h.groups) or '-'}", file=sys.stderr)
    return playbook, inventory, overrides


def _load(args: argparse.Namespace) -> tuple[Playbook, Inventory]:
    playbook, inventory, _ = _load_inputs(args.playbook, args.inventory, args)
    return playbook, inventory


def _controller_tools(playbook: Playbook, inventory: Inventory, plan: Plan) -> dict[str, str]:
    from k3rollout.transport.factory import check_controller_tools

    return check_controller_tools(playbook, {h: inventory.hosts[h] for h in plan.hosts})


def _list_hosts(playbook: Playbook, inventory: Inventory) -> int:
    """ansible-playbook --list-hosts, in its format."""
    play = playbook.play
    pattern = play.host_pattern()
    hosts = inventory.select(pattern)
    print(f"\nplaybook: {playbook.path}\n")
    print(f"  play #1 ({pattern}): {play.name}\tTAGS: []")
    print(f"    pattern: {[pattern]!r}")
    print(f"    hosts ({len(hosts)}):")
    for h in hosts:
        print(f"      {h}")
    print()
    return EXIT_OK


def cmd_validate(args: argparse.Namespace, clock: Clock) -> int:
    from k3rollout.plan import make_plan

    playbook, inventory = _load(args)
    if args.list_hosts:
        return _list_hosts(playbook, inventory)
    plan = make_plan(playbook, inventory)
    _controller_tools(playbook, inventory, plan)
    print(f"ok: {playbook.path}: play {playbook.play.name!r}, {len(playbook.stages)} stages; "
          f"{inventory.path}: {len(inventory.hosts)} hosts, {len(plan.hosts)} in the play, {len(plan.batches)} batches"
          + (f", {len(plan.replicas)} replicas of {plan.profile.get('model')} (profile {plan.profile.get('name')})"
             if plan.replicas else ""))
    return EXIT_OK


def cmd_plan(args: argparse.Namespace, clock: Clock) -> int:
    from k3rollout.plan import make_plan

    playbook, inventory = _load(args)
    if args.list_hosts:
        return _list_hosts(playbook, inventory)
    window_s, _ = _window_seconds(args, clock)
    history = None
    if getattr(args, "history", None):
        from k3rollout.report.history import load_history

        history = load_history([d for group in args.history for d in group])
    plan = make_plan(playbook, inventory, window_s=window_s, history=history)
    _controller_tools(playbook, inventory, plan)
    if getattr(args, "preflight", False):
        from k3rollout.engine.session import new_run_id

        pre = _preflight(playbook, inventory, Path("runs") / f"preflight-{new_run_id(clock)}")
        plan.notes.extend(_preflight_notes(pre))
    fmt = "json" if args.json else args.format
    from k3rollout.plan.approval import plan_digest

    digest = plan_digest(plan.to_dict())
    if fmt in ("json", "md", "html"):
        from k3rollout.report.render import render_plan

        text = render_plan(plan.to_dict(), fmt)
        if args.output:
            Path(args.output).write_text(text, encoding="utf-8")
            print(f"plan: {args.output}")
        else:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return EXIT_OK
    print(f"Plan: {plan.play}  ({len(plan.hosts)} nodes, serial {plan.serial}, "
          f"max_fail_percentage {plan.max_fail_percentage:g}%, min_serving {plan.min_serving} {plan.unit}s)")
    print("Stages per node: " + " -> ".join(s["stage"] for s in plan.stages))
    for note in plan.notes:
        print(f"note: {note}")
    from k3rollout.engine.k8s_access import describe_where

    places: dict[str, list[str]] = {}
    for h in plan.hosts:
        places.setdefault(describe_where(inventory.hosts[h].vars, inventory.path), []).append(h)
    print("Scheduler operations (never on the node being changed):")
    for place, nodes in places.items():
        print(f"  {', '.join(nodes)}: {place}")
    if plan.replicas:
        print(f"Replicas of {plan.profile.get('model')} (profile {plan.profile.get('name')}, needs "
              f"{plan.profile.get('need_gib')} GiB of usable GPU memory per replica):")
        for r in plan.replicas:
            lay = r["layout"]
            print(f"  replica {r['id']}: {', '.join(r['nodes'])}  {lay['name']} (tp {lay['tp']} pp {lay['pp']} "
                  f"dp {lay['dp']} ep {lay['ep']}, {lay['nnodes']} node(s)) on {r['gpus']} x {r['gpu']}, "
                  f"{r['usable_gib']}/{r['gpu_mem_gib']} GiB usable/total"
                  + (f", all-to-all {r['all2all_backend']} over {r['interconnect']}" if r.get("all2all_backend") else ""))
    print(f"{'batch':>5}  {'start':>7}  {'takes':>7}  {'+rollback':>9}  {plan.unit + 's serving':>9}  {'window':>6}  nodes")
    for b in plan.batches:
        fit = "-" if b.fits_window is None else ("fits" if b.fits_window else "NO")
        cap = " (split by min_serving)" if b.capped_by_capacity else ""
        print(f"{b.index:>5}  {format_duration(b.start_offset_s):>7}  {format_duration(b.estimate_s):>7}  "
              f"{format_duration(b.rollback_estimate_s):>9}  {b.serving_during:>4}/{b.serving_before:<4}  {fit:>6}  "
              + (f"replicas {', '.join(b.replicas)}: " if b.replicas else "") + f"{', '.join(b.nodes)}{cap}")
    from k3rollout.plan.timing import describe

    for line in describe(plan.timing, plan.unit, lambda x: format_duration(x) if x >= 10 else f"{x:.2f}s"):
        print(line)
    print(f"plan sha256 {digest} (run --approved-plan refuses a plan that differs)")
    print(f"total {format_duration(plan.total_estimate_s)}"
          + ("" if window_s is None else f" in a {format_duration(window_s)} window: "
             + ("fits" if plan.fits_window else "does NOT fit")))
    if getattr(args, "check_access", False):
        from k3rollout.engine.k8s_access import check_access

        bad = False
        for c in check_access({h: inventory.hosts[h] for h in plan.hosts}, inventory.path):
            print(f"credentials for {c['server']} ({len(c['nodes'])} nodes): {'ok' if c['ok'] else 'MISSING RIGHTS'}")
            for a in c["checks"]:
                bad |= not a["allowed"]
                print(f"  {'yes' if a['allowed'] else 'NO ':<3} {a['verb']} {a['resource']}"
                      f"{'.' + a['group'] if a['group'] else ''}: {a['for']}")
        if bad:
            print("error: the controller's Kubernetes credentials cannot do what this rollout needs", file=sys.stderr)
            return 2
        slurm = _slurm_access(inventory, list(plan.hosts))
        for s in slurm:
            print(f"Slurm reservations ({len(s['nodes'])} nodes): {'ok' if s['ok'] else 'MISSING RIGHTS'}")
            print(f"  {'yes' if s['ok'] else 'NO ':<3} create reservation (the cluster lock): {s['detail']}")
        if not all(s["ok"] for s in slurm):
            print("error: " + "; ".join(s["detail"] for s in slurm if not s["ok"]), file=sys.stderr)
            return 2
    if args.rollback:
        for b in plan.batches:
            for rp in b.rollback_plan:
                print(f"  batch {b.index} {rp['node']}:")
                for s in rp["steps"]:
                    print(f"    - {s}")
    return EXIT_OK


def _slurm_access(inventory: Inventory, hosts: list[str]) -> list[dict[str, Any]]:
    """The Slurm reservation right of ``plan --check-access`` (read-only), through the run's
    transport where scontrol runs on an inventory host (or on a simulated controller)."""
    from k3rollout.engine.session import executor_hosts
    from k3rollout.scheduler.cluster_lock import slurm_controllers
    from k3rollout.scheduler.slurm_access import check_slurm_access
    from k3rollout.transport.factory import make_executor

    if not slurm_controllers(inventory, hosts):
        return []
    scratch = Path(tempfile.mkdtemp(prefix="k3rollout-access-"))
    try:
        executor = make_executor(executor_hosts(inventory, hosts), scratch)
        try:
            return check_slurm_access(inventory, hosts, executor)
        finally:
            executor.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def cmd_preflight(args: argparse.Namespace, clock: Clock) -> int:
    """Read-only checks on every node before the window (engine/preflight.py)."""
    from k3rollout.engine.preflight import render_md
    from k3rollout.engine.session import new_run_id

    playbook, inventory = _load(args)
    report = _preflight(playbook, inventory, Path(args.output or Path("runs") / f"preflight-{new_run_id(clock)}"))
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2, default=str) + "\n")
    else:
        sys.stdout.write(render_md(report))
        print(f"report: {report['_paths'][0]}\n        {report['_paths'][1]}")
    if report["ok"]:
        return EXIT_OK
    from k3rollout.engine.preflight import bad_input

    # a failure of the input itself (a var that does not fit the node, missing rights, the
    # playbook) is exit 2, any other failed check exit 1
    return EXIT_INPUT if bad_input(report) else EXIT_HALTED


def _preflight(playbook: Playbook, inventory: Inventory, out_dir: Path,
               skip: list[str] | None = None) -> dict[str, Any]:
    from k3rollout.engine.preflight import controller_check, preflight, write_report
    from k3rollout.engine.session import executor_hosts
    from k3rollout.plan import make_plan
    from k3rollout.transport.factory import make_executor

    plan = make_plan(playbook, inventory)
    unknown = [h for h in skip or [] if h not in plan.hosts]
    if unknown:
        raise InputError(f"--skip-node {', '.join(unknown)}: not a node of this play ({len(plan.hosts)} nodes)")
    out_dir.mkdir(parents=True, exist_ok=True)
    # the scheduler hosts too: a Slurm controller named by k3_scheduler_host is asked there
    executor = make_executor(executor_hosts(inventory, list(plan.hosts)), out_dir)
    try:
        report = preflight(playbook, inventory, list(plan.hosts), executor,
                           controller=controller_check(playbook, inventory, list(plan.hosts), executor))
    finally:
        executor.close()
    report["skipped_nodes"] = list(skip or [])
    report["_paths"] = [str(p) for p in write_report(report, out_dir)]
    return report


def cmd_unlock(args: argparse.Namespace, clock: Clock) -> int:
    """Take over the in-cluster lock a run that is gone left (a Slurm reservation, the lock
    directory of a ``scheduler: none`` cluster): never one whose holder is alive on this
    controller. The operator has checked that run's nodes first."""
    from k3rollout.engine.session import executor_hosts, new_run_id
    from k3rollout.plan import make_plan
    from k3rollout.scheduler.cluster_lock import cluster_locks, holder_text
    from k3rollout.transport.factory import make_executor

    playbook, inventory = _load(args)
    hosts = list(make_plan(playbook, inventory).hosts)
    run_dir = Path(args.run_dir or Path("runs") / f"unlock-{new_run_id(clock)}")
    run_dir.mkdir(parents=True, exist_ok=True)
    executor = make_executor(executor_hosts(inventory, hosts), run_dir)
    try:
        locks = cluster_locks(inventory, hosts, executor, str(run_dir.resolve()), clock.iso())
        if not locks.locks:
            print("no in-cluster lock for these hosts (Kubernetes: the Lease; `kubectl -n kube-system delete lease "
                  "k3rollout` releases it)")
        for lock in locks.locks:
            gone = lock.unlock()
            print(f"released {lock.describe()}: " + (f"held by {holder_text(gone)}" if gone else "no holder named"))
    finally:
        executor.close()
    return EXIT_OK


def _skip_note(pre: dict[str, Any] | None, skip: list[str]) -> str:
    why = []
    for h in skip:
        if pre is None:
            why.append(h)
            continue
        failed = [f"{c['check']}: {c['detail']}" for c in pre["nodes"].get(h, {}).get("checks", []) if not c["ok"]]
        why.append(f"{h} ({'; '.join(failed) or 'preflight passed'})")
    return "left out of this run with --skip-node: " + ", ".join(why)


def _run_preflight(playbook: Playbook, inventory: Inventory, run_dir: Path, skip: list[str],
                   given: str | None) -> dict[str, Any] | None:
    """The preflight of ``run``: performed now (read-only, on every node of the play; the
    default), ``--preflight REPORT`` from an earlier ``k3rollout preflight`` of the same
    play, or none (``given`` None: ``--no-preflight``)."""
    from k3rollout.engine.preflight import write_report
    from k3rollout.plan import make_plan
    from k3rollout.plan.target import target_of

    hosts = make_plan(playbook, inventory).hosts
    unknown = [h for h in skip if h not in hosts]
    if unknown:
        raise InputError(f"--skip-node {', '.join(unknown)}: not a node of this play ({len(hosts)} nodes)")
    if given is None:
        return None
    if given == "now":
        return _preflight(playbook, inventory, run_dir, skip)
    try:
        report: dict[str, Any] = json.loads(Path(given).read_text())
        nodes, target = report["nodes"], report["target_driver"]
        report["failed_nodes"], report["controller"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"not a preflight report ({exc})", path=given) from None
    missing = [h for h in hosts if h not in nodes]
    if missing:
        raise InputError(f"the preflight report does not cover {', '.join(missing)}; run `k3rollout preflight` "
                         "for this play again", path=given)
    if target != target_of(playbook)[0]:
        raise InputError(f"the preflight report is for driver {target}, this play installs {target_of(playbook)[0]}",
                         path=given)
    report["skipped_nodes"] = list(skip)
    report["_paths"] = [str(p) for p in write_report(report, run_dir)]
    return report


def _preflight_notes(pre: dict[str, Any]) -> list[str]:
    from k3rollout.engine.preflight import summary_lines

    out = [_unchanged_note(pre)] if pre.get("no_change_nodes") else []
    if pre["ok"]:
        return [f"preflight passed on all {len(pre['nodes'])} node(s): {pre['_paths'][1]}", *out]
    return [f"preflight FAILED (run refuses these nodes unless --skip-node): {line}"
            for line in summary_lines(pre)] + out


def _unchanged_note(pre: dict[str, Any]) -> str:
    return ("preflight: not changed by the play (no rollback checks; baseline only, they stay in service): "
            + "; ".join(f"{h}: {why}" for h, why in pre["no_change_nodes"].items()))


def _skip_nodes(inventory: Inventory, skip: list[str]) -> Inventory:
    """The inventory without the nodes named by --skip-node (they are not touched)."""
    groups = {n: dataclasses.replace(g, hosts=[h for h in g.hosts if h not in skip]) for n, g in inventory.groups.items()}
    return dataclasses.replace(inventory, hosts={h: v for h, v in inventory.hosts.items() if h not in skip},
                               groups=groups)


def _run_dir(args: argparse.Namespace, clock: Clock) -> Path:
    if args.run_dir:
        return Path(args.run_dir)
    from k3rollout.engine.session import new_run_id

    return Path("runs") / new_run_id(clock)


def _start_run(playbook_path: str, inventory_path: str | list[str], run_dir: Path, args: argparse.Namespace,
               clock: Clock) -> int:
    from k3rollout import logsetup
    from k3rollout.engine.session import Session
    from k3rollout.live.views import RunViews
    from k3rollout.plan import make_plan

    playbook, inventory, overrides = _load_inputs(playbook_path, inventory_path, args)
    if getattr(args, "list_hosts", False):
        return _list_hosts(playbook, inventory)
    window_s, window_end = _window_seconds(args, clock)
    plan = make_plan(playbook, inventory, window_s=window_s)
    _controller_tools(playbook, inventory, plan)
    # the read-only preflight, before anything changes (opt out with --no-preflight, which
    # the journal and the report record): a failed node stops the run unless named with
    # --skip-node, and is then left out of it (the plan's notes in the journal and
    # preflight.json say so)
    skip = list(getattr(args, "skip_node", None) or [])
    given = getattr(args, "preflight", None)
    no_preflight = bool(getattr(args, "no_preflight", False))
    if no_preflight and given:
        raise InputError("--no-preflight and --preflight exclude each other")
    # the preflight writes its report into the run directory: a full disk there is reported
    # with the run directory's file system, as one later in the run is
    _CURRENT_RUN_DIR[0] = run_dir
    pre = _run_preflight(playbook, inventory, run_dir, skip, None if no_preflight else (given or "now"))
    refused = [h for h in (pre or {}).get("failed_nodes", []) if h not in skip]
    if pre is not None and (refused or not pre["controller"].get("ok", True) or not pre.get("play", {}).get("ok", True)):
        from k3rollout.engine.preflight import bad_input, summary_lines

        for line in summary_lines(pre):
            print(f"preflight: {line}", file=sys.stderr)
        wrong = bad_input(pre, skip)
        if wrong:
            # the input does not fit the cluster (a var, the credentials, the playbook): exit 2
            print(f"preflight refused the input for {', '.join(wrong)}: nothing was changed. Fix what each line "
                  f"above names, then run again. Report: {pre['_paths'][1]}", file=sys.stderr)
            return EXIT_INPUT
        print(f"preflight FAILED on {', '.join(refused) or 'the controller'}: nothing was changed. Fix it, or leave "
              f"the node(s) out with --skip-node. Report: {pre['_paths'][1]}", file=sys.stderr)
        return EXIT_HALTED
    if skip:
        inventory = _skip_nodes(inventory, skip)
        plan = make_plan(playbook, inventory, window_s=window_s)
    approved = getattr(args, "approved_plan", None)
    if approved:
        from k3rollout.plan.approval import differences, plan_digest

        try:
            want = json.loads(Path(approved).read_text())
        except (OSError, ValueError) as exc:
            raise InputError(f"approved plan unreadable ({exc})", path=approved) from None
        diff = differences(want, plan.to_dict())
        if diff or plan_digest(want) != plan_digest(plan.to_dict()):
            raise InputError("the plan computed now differs from the approved one; nothing was changed:\n  "
                             + "\n  ".join(diff or ["(digest differs)"]), path=approved)
    if not getattr(args, "yes", True) and sys.stdin.isatty():
        print(f"About to change {len(plan.hosts)} node(s) in {len(plan.batches)} batch(es). Type 'yes' to go on: ",
              end="", flush=True)
        if sys.stdin.readline().strip() != "yes":
            print("not confirmed; nothing changed")
            return EXIT_INPUT
    if skip:
        # on record in the journal (run_started carries the plan) and in preflight.json/md
        plan.notes.append(_skip_note(pre, skip))
    if pre is not None and pre.get("no_change_nodes"):
        plan.notes.append(_unchanged_note(pre))
    run_dir.mkdir(parents=True, exist_ok=True)
    _CURRENT_RUN_DIR[0] = run_dir
    logsetup.configure(RunDir(run_dir).events)
    with RunViews(run_dir, window_end=window_end, **_view_args(args)) as views:
        status = Session(run_dir, clock).start(playbook, inventory, plan, window_end, on_event=views.on_event,
                                               approved_plan=str(Path(approved).resolve()) if approved else None,
                                               overrides=overrides, preflight=_preflight_record(pre, given))
    return _report_and_code(run_dir, status)


def _view_args(args: argparse.Namespace) -> dict[str, Any]:
    """The live view's and the metrics endpoint's flags (k3rollout/live/views.py)."""
    return {"plain": bool(getattr(args, "plain", False)), "metrics_port": getattr(args, "metrics_port", None),
            "metrics_address": getattr(args, "metrics_address", None) or "127.0.0.1"}


def _preflight_record(pre: dict[str, Any] | None, given: str | None) -> dict[str, Any]:
    """What run_started records of the preflight: its outcome and report (kept as evidence
    by the session), or that it was not run (--no-preflight)."""
    if pre is None:
        return {"ran": False, "reason": "--no-preflight: nobody checked before the run that the target packages "
                                        "are offered and each node's rollback packages can still be downloaded"}
    report = {k: v for k, v in pre.items() if not k.startswith("_")}
    return {"ran": True, "ok": bool(pre["ok"]), "from": "now" if given in (None, "now") else str(given),
            "failed_nodes": list(pre["failed_nodes"]), "skipped_nodes": list(pre.get("skipped_nodes", [])),
            "report": report}


def _tell(*lines: str) -> None:
    """A finished run's last lines on stdout. The run's outcome is its exit code, whoever
    stopped reading (a pipe's EPIPE, a closed terminal's EIO): that never turns it into an
    error."""
    try:
        for line in lines:
            print(line)
        sys.stdout.flush()
    except OSError:
        _silence_stdout()


def _report_and_code(run_dir: Path, status: str) -> int:
    rd = RunDir(run_dir.resolve())
    code = EXIT_OK if status in ("completed", "no_change", "rolled_back") else EXIT_HALTED
    _tell(f"status: {status}", f"report: {rd.report_html}", f"        {rd.report_md}", f"result: {rd.result}")
    return code


def cmd_run(args: argparse.Namespace, clock: Clock) -> int:
    if args.check:
        # ansible-playbook --check: show what would change, change nothing. That is `plan`.
        print("--check: nothing is changed; this is the plan (`k3rollout plan`)", file=sys.stderr)
        for key, value in (("json", False), ("format", "text"), ("output", None), ("rollback", False),
                           ("check_access", False)):
            setattr(args, key, getattr(args, key, value))
        return cmd_plan(args, clock)
    return _start_run(args.playbook, args.inventory, _run_dir(args, clock), args, clock)


def cmd_demo(args: argparse.Namespace, clock: Clock) -> int:
    playbook, inventory = default_paths()
    args.yes = True
    return _start_run(str(playbook), str(inventory), _run_dir(args, clock), args, clock)


def _existing_run_dir(path: str) -> Path:
    p = RunDir(path).require().path
    _CURRENT_RUN_DIR[0] = p
    return p


def cmd_resume(args: argparse.Namespace, clock: Clock) -> int:
    from k3rollout import logsetup
    from k3rollout.engine.session import Session
    from k3rollout.live.views import RunViews

    run_dir = _existing_run_dir(args.run_dir)
    logsetup.configure(RunDir(run_dir).events)
    with RunViews(run_dir, **_view_args(args)) as views:
        status = Session(run_dir, clock).resume(on_event=views.on_event, accept_changed=args.accept_changed_inputs)
    return _report_and_code(run_dir, status)


def cmd_rollback(args: argparse.Namespace, clock: Clock) -> int:
    from k3rollout import logsetup
    from k3rollout.engine.session import Session
    from k3rollout.live.views import RunViews

    run_dir = _existing_run_dir(args.run_dir)
    logsetup.configure(RunDir(run_dir).events)
    session = Session(run_dir, clock)
    with RunViews(run_dir, **_view_args(args)) as views:
        ok = session.rollback(args.batch, on_event=views.on_event, accept_changed=args.accept_changed_inputs)
    _tell(f"rollback: STOPPED: {session.rollback_halt}" if session.rollback_halt else
          f"rollback: {'done' if ok else 'FAILED on at least one node (kept cordoned)'}",
          f"report: {RunDir(run_dir).report_html}")
    return EXIT_OK if ok else EXIT_HALTED


def _readable_run_dir(path: str) -> Path:
    """A run directory to read only: unlike ``_existing_run_dir`` it is not made the place
    an internal error writes its debug.log (``watch`` and ``metrics`` write nothing there)."""
    return RunDir(path).require().path


def cmd_watch(args: argparse.Namespace, clock: Clock) -> int:
    from k3rollout.live.screen import watch

    run_dir = _readable_run_dir(args.run_dir)
    try:
        why = watch(run_dir, plain=args.plain)
    except KeyboardInterrupt:
        return EXIT_SIGINT
    if why == "gone":
        print(f"k3rollout: the process that ran {run_dir} is gone and the run did not finish; "
              f"`k3rollout resume {run_dir}` continues it", file=sys.stderr)
    return EXIT_OK


def cmd_metrics(args: argparse.Namespace, clock: Clock) -> int:
    from k3rollout.live import metrics
    from k3rollout.live.follow import JournalTail
    from k3rollout.live.state import LiveRun

    run_dir = _readable_run_dir(args.run_dir)
    state = LiveRun()
    for r in JournalTail(RunDir(run_dir).journal).read():
        state.apply(r)
    reg = metrics.registry(lambda: nullcontext(state), clock.now)
    if args.textfile:
        try:
            metrics.write_textfile(args.textfile, reg)
        except OSError as exc:
            raise InputError(f"cannot write the textfile ({exc.strerror or exc})", path=args.textfile) from None
    else:
        sys.stdout.write(metrics.text(reg))
    return EXIT_OK


def cmd_approve(args: argparse.Namespace, clock: Clock) -> int:
    from k3rollout.engine.gates import open_pauses
    from k3rollout.runlog.journal import Journal

    run_dir = _existing_run_dir(args.run_dir)
    rd = RunDir(run_dir)
    waiting = open_pauses(Journal.read(rd.journal))
    if args.pause:
        chosen = [p for p in waiting if p["pause"] == args.pause]
        if not chosen:
            open_ids = ", ".join(p["pause"] for p in waiting) or "none"
            raise InputError(f"no open pause {args.pause!r} (open: {open_ids})", path=str(run_dir))
    elif len(waiting) == 1:
        chosen = waiting
    elif not waiting:
        raise InputError("the run is not waiting at any gate", path=str(run_dir))
    else:
        raise InputError("the run waits at several gates; name one with --pause: "
                         + ", ".join(p["pause"] for p in waiting), path=str(run_dir))
    p = chosen[0]
    decision = "rejected" if args.reject else "approved"
    try:
        path = rd.write_approval(p["pause"], decision=decision, by=args.by or getpass.getuser(),
                                 note=args.note or "", at=clock.iso())
    except FileExistsError:
        raise InputError(f"pause {p['pause']} already has a decision", path=str(run_dir)) from None
    print(f"{decision}: {p['pause']} ({p.get('reason', '')})")
    print(f"recorded in {path}; the run picks it up within a second and journals it")
    return EXIT_OK


def cmd_report(args: argparse.Namespace, clock: Clock) -> int:
    from k3rollout.report.render import render, write_model

    run_dir = _existing_run_dir(args.run_dir)
    if args.format:
        text, problems = render(run_dir, args.format)
        sys.stdout.write(text)
    else:
        problems = write_model(run_dir)["verification"]
        print(f"report: {RunDir(run_dir).report_html}")
    if problems:
        # the report was written, with the items this evidence backs marked not proven
        for p in problems:
            print(f"k3rollout: error: {p}", file=sys.stderr)
        print(f"k3rollout: error: {run_dir}: {len(problems)} verification failure(s); the checklist items they back "
              "are marked not proven", file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK


def cmd_observe(args: argparse.Namespace, clock: Clock) -> int:
    from k3rollout import logsetup
    from k3rollout.engine.observe import Observer

    run_dir = _existing_run_dir(args.run_dir)
    try:
        every, for_s = parse_duration(args.every), parse_duration(args.for_)
    except ValueError as exc:
        raise InputError(f"--every/--for: {exc}") from None
    if every <= 0:
        raise InputError("--every must be longer than 0s")
    logsetup.configure(RunDir(run_dir).events)
    observer = Observer(run_dir, clock)

    def show(rec: dict[str, Any] | None) -> None:
        if rec is None:
            return
        obs = rec["obs"]
        print(f"observation {rec['index']} ({len(rec['nodes'])} node(s), {obs.get('hours_since_run')}h after the "
              f"run): {rec['decision']}")
        for piece, e in rec["evidence"].items():
            status = "not checked" if e["ok"] is None else "ok" if e["ok"] else "NOT OK"
            print(f"  {piece}: {status}: {e['detail']}")
        print(f"  {rec['recommendation']['text']}")

    try:
        last = observer.run(every, for_s, args.once, on_pass=show)
    except KeyboardInterrupt:
        print("k3rollout: observation stopped; the passes so far are in the journal and the report", file=sys.stderr)
        print(f"report: {RunDir(run_dir).report_html}")
        return EXIT_OK
    print(f"report: {RunDir(run_dir).report_html}")
    return EXIT_HALTED if last is not None and last["decision"] == "rollback" else EXIT_OK


def cmd_triage(args: argparse.Namespace, clock: Clock) -> int:
    from k3rollout.checks.triage import classify

    cuda_init_ok = {"ok": True, "failed": False}.get(args.cuda_init or "")
    results = []
    for f in args.logfile:
        p = Path(f)
        try:
            text = p.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            raise InputError("log file not found", path=f) from None
        except OSError as exc:
            raise InputError(f"cannot read log: {exc.strerror}", path=f) from None
        results.append((f, classify(text, driver=args.driver, image_cuda=args.image_cuda, stage=args.stage,
                                    cuda_init_ok=cuda_init_ok, nnodes=args.nnodes,
                                    backoff=False if args.no_backoff else None)))
    if args.json:
        for f, t in results:
            d = t.to_dict(file=f)
            if args.explain:
                d["contributions"] = [h.to_dict() for h in t.hits]
            print(json.dumps(d))
        return EXIT_OK
    for f, t in results:
        print(f"{f}: {t.category} (confidence {t.confidence:.2f}, runner-up {t.runner_up or '-'})")
        if args.explain:
            sys.stdout.write("".join(f"  {ln}\n" for ln in t.explain().splitlines()[1:]))
            continue
        if t.candidates:
            print(f"  candidates: {', '.join(t.candidates)}")
        for line in t.evidence[:5]:
            print(f"  > {line}")
        for s in t.next_steps:
            print(f"  - {s}")
    return EXIT_OK


def cmd_inventory(args: argparse.Namespace, clock: Clock) -> int:
    """ansible-inventory's --list / --host, resolved as every other verb resolves -i."""
    from k3rollout.model import load_inventory
    from k3rollout.model.inputs import dumps

    if args.export:
        from k3rollout.model import ansible_inventory as ai

        action = ["--host", args.host] if args.host else ["--list", "--export"]
        sys.stdout.write(ai.run(list(args.inventory), action=action, playbook_dir=args.playbook_dir,
                                vault=_vault(args), limit=args.limit))
        return EXIT_OK
    inventory = load_inventory(args.inventory, playbook_dir=args.playbook_dir, vault=_vault(args))
    inventory = inventory.limited(args.limit)
    data = inventory.host_json(args.host) if args.host else inventory.to_ansible_json()
    print(dumps(data))
    return EXIT_OK


def cmd_states(args: argparse.Namespace, clock: Clock) -> int:
    from k3rollout.engine.states import build_table, render_table
    from k3rollout.model import load_playbook

    playbook = load_playbook(args.playbook)
    sys.stdout.write(render_table(build_table([s.stage for s in playbook.stages])))
    return EXIT_OK


_CURRENT_RUN_DIR: list[Path | None] = [None]


ACCEPT_CHANGED_HELP = ("go on although the playbook or the inventory changed since the run started "
                       "(refused otherwise); the change is recorded in the journal")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="k3rollout", description="Staged NVIDIA driver + Kimi K3 vLLM rollouts.")
    p.add_argument("--version", action="version", version=f"k3rollout {__version__}")
    sub = p.add_subparsers(dest="verb", required=True)

    def inv(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("-i", "--inventory", required=True, action="append",
                        help="an inventory as Ansible takes it: INI or YAML file, directory, plugin config, "
                             "executable script or host list; give -i several times to merge several")
        sp.add_argument("--vault-password-file", action="append", metavar="FILE",
                        help="vault password file (or executable printing it), as ansible-playbook takes it")
        sp.add_argument("-J", "--ask-vault-pass", action="store_true", help="ask for the vault password")

    def pb_inv(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("playbook")
        inv(sp)

    def ansible_flags(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("-l", "--limit", metavar="SUBSET",
                        help="only these hosts: an Ansible pattern (groups, wildcards, ~regex, :&, :!) or @FILE "
                             "(a retry file)")
        sp.add_argument("-e", "--extra-vars", action="append", metavar="VARS",
                        help="key=value, YAML/JSON, or @FILE; over every other variable, as in Ansible")
        sp.add_argument("-f", "--forks", type=int, help="hosts worked on at once (the play's forks)")
        sp.add_argument("-v", "--verbose", action="count", default=0, help="more detail on stderr (-vvv for more)")
        sp.add_argument("--list-hosts", action="store_true", help="print the hosts the play would run on, and stop")
        sp.add_argument("-C", "--check", action="store_true", help="change nothing: show the plan")
        sp.add_argument("--start-at-task", help=argparse.SUPPRESS)

    def live_flags(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--plain", action="store_true", help="one line per event, even on a terminal")
        sp.add_argument("--metrics-port", type=int, metavar="N",
                        help="serve the run's Prometheus metrics on this port while it works (0: any free port)")
        sp.add_argument("--metrics-address", metavar="ADDR",
                        help="the address the metrics endpoint binds (default 127.0.0.1)")

    def window(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--window", help="maintenance window length from now, e.g. 2h, 90m")
        sp.add_argument("--window-end", help="maintenance window end, ISO 8601 with zone, e.g. 2026-12-03T04:00Z")

    sp = sub.add_parser("validate", help="check a playbook and inventory")
    pb_inv(sp)
    ansible_flags(sp)
    sp.set_defaults(fn=cmd_validate)
    sp = sub.add_parser("plan", help="dry run: batches, durations, capacity, window fit, rollback plans")
    pb_inv(sp)
    ansible_flags(sp)
    window(sp)
    sp.add_argument("--json", action="store_true", help="same as --format json")
    sp.add_argument("--format", choices=["text", "json", "md", "html"], default="text",
                    help="html/md: a plan report reviewers can approve before the window")
    sp.add_argument("--output", help="write the plan report to this file")
    sp.add_argument("--rollback", action="store_true", help="also list each node's rollback plan")
    sp.add_argument("--preflight", action="store_true",
                    help="also run the read-only preflight on every node and add its result to the plan")
    sp.add_argument("--history", nargs="+", action="append", metavar="RUN_DIR",
                    help="take stage durations from these earlier runs' journals (p90 per stage and hardware "
                         "class) instead of the playbook's estimates")
    sp.add_argument("--check-access", action="store_true",
                    help="ask each Kubernetes API server (read-only) whether the controller's credentials can read "
                         "nodes and pods, patch nodes, evict pods and hold the cluster's Lease, and each Slurm "
                         "controller whether scontrol's user may create the reservation that is the cluster lock")
    sp.set_defaults(fn=cmd_plan)
    sp = sub.add_parser("run", help="execute the rollout")
    pb_inv(sp)
    ansible_flags(sp)
    window(sp)
    sp.add_argument("--run-dir")
    sp.add_argument("--approved-plan", help="the `plan --json` output a reviewer approved; the run refuses to "
                                            "start if the plan it computes now differs")
    sp.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    live_flags(sp)
    sp.add_argument("--preflight", nargs="?", const="now", metavar="REPORT",
                    help="the read-only preflight `run` performs on every node before any change (the default); "
                         f"with REPORT, read from an earlier `k3rollout preflight` report ({PREFLIGHT_JSON}) instead")
    sp.add_argument("--no-preflight", action="store_true",
                    help="start without the read-only preflight (recorded in the journal and the report: nobody "
                         "checked before the window that each node's rollback packages can still be downloaded)")
    sp.add_argument("--skip-node", action="append", metavar="NODE",
                    help="leave this node out of the run (e.g. one that failed preflight); may repeat")
    sp.set_defaults(fn=cmd_run)
    sp = sub.add_parser("preflight", help="read-only checks on every node before the window (exit 1 if one fails, 2 if "
                                             "the input does not fit)")
    pb_inv(sp)
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--output", help=f"folder for {PREFLIGHT_JSON} and {PREFLIGHT_MD} (default runs/preflight-<id>)")
    sp.set_defaults(fn=cmd_preflight)
    sp = sub.add_parser("unlock", help="take over the in-cluster lock (Slurm reservation, lock directory) of a run "
                                       "that is gone, once its nodes are checked; never a live holder's")
    pb_inv(sp)
    sp.add_argument("--run-dir", help="where simulated hosts live (the sim transport); default runs/unlock-<id>")
    sp.set_defaults(fn=cmd_unlock)
    sp = sub.add_parser("resume", help="continue a run that was interrupted")
    sp.add_argument("run_dir")
    sp.add_argument("--accept-changed-inputs", action="store_true", help=ACCEPT_CHANGED_HELP)
    live_flags(sp)
    sp.set_defaults(fn=cmd_resume)
    sp = sub.add_parser("approve", help="let a run waiting at a gate (pause) go on, or --reject to stop it")
    sp.add_argument("run_dir")
    sp.add_argument("--pause", help="which gate, when the run waits at several")
    sp.add_argument("--reject", action="store_true", help="stop the rollout at this gate")
    sp.add_argument("--by", help="who decides (default: the login name)")
    sp.add_argument("--note", help="why, for the record (change ticket, chat link)")
    sp.set_defaults(fn=cmd_approve)
    sp = sub.add_parser("rollback", help="execute the recorded rollback plans, batch by batch (newest first), "
                                         "draining nodes in service first and keeping min_serving; "
                                         "`resume` finishes an interrupted one")
    sp.add_argument("run_dir")
    sp.add_argument("--batch", type=int)
    sp.add_argument("--accept-changed-inputs", action="store_true", help=ACCEPT_CHANGED_HELP)
    live_flags(sp)
    sp.set_defaults(fn=cmd_rollback)
    sp = sub.add_parser("report", help="(re)generate or print a run's report")
    sp.add_argument("run_dir")
    sp.add_argument("--format", choices=["html", "md", "json"])
    sp.set_defaults(fn=cmd_report)
    sp = sub.add_parser("observe", help="after the window: re-run the read-only checks on the upgraded nodes, compare "
                                        "with the run's evidence, and recommend keep, stay isolated or roll back "
                                        "(changes nothing, takes no lock)")
    sp.add_argument("run_dir")
    sp.add_argument("--every", default="1h", help="time between passes (default 1h)")
    sp.add_argument("--for", dest="for_", default="24h", help="how long to keep observing (default 24h)")
    sp.add_argument("--once", action="store_true", help="one pass, then stop")
    sp.set_defaults(fn=cmd_observe)
    sp = sub.add_parser("watch", help="the live view of a run, from any terminal: follows its journal until the run "
                                      "ends (read-only: no lock, nothing written)")
    sp.add_argument("run_dir")
    sp.add_argument("--plain", action="store_true", help="one line per event, even on a terminal")
    sp.set_defaults(fn=cmd_watch)
    sp = sub.add_parser("metrics", help="a run's Prometheus metrics (text format), printed or written for "
                                        "node_exporter's textfile collector")
    sp.add_argument("run_dir")
    sp.add_argument("--textfile", metavar="PATH", help="write here instead (replaced atomically; name it *.prom)")
    sp.set_defaults(fn=cmd_metrics)
    sp = sub.add_parser("triage", help="classify failure logs by the decision tree")
    sp.add_argument("logfile", nargs="+")
    sp.add_argument("--json", action="store_true")
    sp.add_argument("--driver", help="host driver version, e.g. 575.57.08 (live fact)")
    sp.add_argument("--image-cuda", help="image CUDA version, e.g. 13.0.1 (live fact)")
    sp.add_argument("--stage", help="the rollout stage that failed, e.g. cuda_check, vllm_smoke, multinode")
    sp.add_argument("--cuda-init", choices=["ok", "failed"], help="whether CUDA init already succeeded (live fact)")
    sp.add_argument("--nnodes", type=int, help="node count of the failing replica (live fact)")
    sp.add_argument("--explain", action="store_true",
                    help="show the scoring: every matched line with its family and weight, live facts, per-category "
                         "scores, runner-up and confidence")
    sp.add_argument("--no-backoff", action="store_true",
                    help="the signals alone: where none decides, do not ask the lexical back-off (a word model "
                         "fitted on the labelled corpus, docs/domain.md)")
    sp.set_defaults(fn=cmd_triage)
    sp = sub.add_parser("demo", help="a whole rollout on the embedded simulated cluster")
    sp.add_argument("--run-dir")
    sp.add_argument("--no-preflight", action="store_true", help="as for `run`: start without the read-only preflight")
    live_flags(sp)
    window(sp)
    sp.set_defaults(fn=cmd_demo)
    sp = sub.add_parser("inventory", help="print the inventory as ansible-inventory does (--list, --host)")
    inv(sp)
    act = sp.add_mutually_exclusive_group()
    act.add_argument("--list", action="store_true", help="every host and group (the default)")
    act.add_argument("--host", help="one host's variables")
    sp.add_argument("--export", action="store_true", help="ansible-inventory's --export form (group vars by group)")
    sp.add_argument("--playbook-dir", help="also apply group_vars/ and host_vars/ from this directory")
    sp.add_argument("-l", "--limit", metavar="SUBSET", help="only these hosts (an Ansible pattern or @FILE)")
    sp.set_defaults(fn=cmd_inventory)
    sp = sub.add_parser("states", help="print the node state machine for a playbook")
    sp.add_argument("playbook")
    sp.set_defaults(fn=cmd_states)
    return p


def main(argv: list[str] | None = None, clock: Clock | None = None) -> int:
    clock = clock or Clock()
    _CURRENT_RUN_DIR[0] = None
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    # a run directory holds host facts, evidence and the journal: private to its owner
    # (0700 folders, 0600 files; evidence 0400), whatever umask the shell has
    umask = os.umask(PRIVATE_UMASK)
    try:
        return _main(args, clock)
    finally:
        os.umask(umask)


PRIVATE_UMASK = 0o077


def _main(args: argparse.Namespace, clock: Clock) -> int:
    try:
        # the handlers are installed inside the try: a signal that comes just after them is
        # taken by its KeyboardInterrupt branch below, not left to escape the command
        if args.verb in ("run", "demo", "resume", "rollback", "observe"):
            # SIGTERM (a closed window, a killed tmux) unwinds like Ctrl-C: the lock is released
            # and the reports are written; the journal already holds everything done so far.
            # Only the first signal unwinds: later ones (a second Ctrl-C, TERM then TERM) must not
            # cut short the wait for steps in flight, or the journal would be closed under them
            _STOPPING[0] = False
            _UNRAISABLE[0] = sys.unraisablehook
            sys.unraisablehook = _stop_was_swallowed
            signal.signal(signal.SIGTERM, _terminate)
            signal.signal(signal.SIGINT, _terminate)
        if args.verb in ("run", "demo", "resume", "rollback"):
            # a closed terminal (its hangup) leaves the run going: the live view falls silent,
            # `watch` shows it from anywhere, Ctrl-C or SIGTERM stop it
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        code: int = args.fn(args, clock)
        return code
    except K3RolloutError as exc:
        from k3rollout.runlog.journal import JournalWriteError

        if isinstance(exc, JournalWriteError):
            return _internal_error(exc)
        print(f"k3rollout: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        if args.verb == "observe":
            # stopped outside its passes (cmd_observe takes a stop during them): there is nothing
            # to resume, and a stopped observation is not a failure
            print("k3rollout: observation stopped; the passes so far are in the journal", file=sys.stderr)
        else:
            print("k3rollout: interrupted; continue with `k3rollout resume RUN_DIR`", file=sys.stderr)
        # the run is unwound and recorded: a later signal has nothing left to wait for, and
        # must not kill the interpreter while it tears its modules down (the handlers are
        # reset to the default there; one set to ignore stays ignored)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        return EXIT_OK if args.verb == "observe" else EXIT_HALTED
    except BrokenPipeError:
        # the reader went away (`k3rollout plan ... | head -3`): stop quietly, as a shell tool
        # killed by SIGPIPE does (128 + 13), instead of an internal error
        _silence_stdout()
        return EXIT_SIGPIPE
    except Exception as exc:  # noqa: BLE001 - the one place an internal error becomes exit 70
        return _internal_error(exc)
    finally:
        if _UNRAISABLE[0] is not None:
            sys.unraisablehook, _UNRAISABLE[0] = _UNRAISABLE[0], None


def _root_cause(exc: BaseException) -> tuple[BaseException, OSError | None]:
    """The first error of a chain (a failure while cleaning up after another is not the
    news), and the full-disk OSError in it, if any."""
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ if e.__cause__ is not None else (None if e.__suppress_context__ else e.__context__)
    from k3rollout.runlog.journal import DISK_FULL, JournalWriteError

    for e in reversed(chain):
        if isinstance(e, JournalWriteError):
            return e, e.cause
        if isinstance(e, OSError) and e.errno in DISK_FULL:
            return e, e
    return exc, None


def _mount_point(path: Path) -> Path:
    p = path.resolve()
    dev = p.stat().st_dev
    while p.parent != p and p.parent.stat().st_dev == dev:
        p = p.parent
    return p


def _internal_error(exc: Exception) -> int:
    run_dir = _CURRENT_RUN_DIR[0]
    cause, full = _root_cause(exc)
    resume = f"k3rollout resume {run_dir}" if run_dir is not None else "k3rollout resume RUN_DIR"
    from k3rollout.runlog.journal import JournalWriteError

    if full is not None or isinstance(cause, JournalWriteError):
        # nothing more is written to a full disk (not even debug.log): one message, exit 70
        where = ""
        if run_dir is not None and run_dir.is_dir():
            try:
                mnt = _mount_point(run_dir)
                st = os.statvfs(run_dir)
                where = (f" The run directory {run_dir.resolve()} is on the file system mounted at {mnt} "
                         f"({st.f_bavail * st.f_frsize // (1 << 20)} MiB free now).")
            except OSError:
                where = f" The run directory is {run_dir}."
        if isinstance(cause, JournalWriteError) or full is None:
            print(f"k3rollout: error: {cause}{where}", file=sys.stderr)
        elif run_dir is not None and not RunDir(run_dir).journal.exists():
            # stopped before the run's first record (the preflight's report, say): there is
            # nothing to resume, and nothing was changed
            what = f" ({full.filename})" if full.filename else ""
            print(f"k3rollout: error: {full.strerror or full}{what}: the run stopped before it started; nothing was "
                  f"changed.{where} Free space (or lift the file-size limit), then run it again.", file=sys.stderr)
        else:
            what = f" ({full.filename})" if full.filename else ""
            print(f"k3rollout: error: {full.strerror or full}{what}: the run stopped.{where} The journal holds every "
                  f"step up to this point: free space (or lift the file-size limit), then `{resume}` continues the "
                  "run.", file=sys.stderr)
        return EXIT_INTERNAL
    tb = traceback.format_exc()
    path: Path | None
    if run_dir is not None and run_dir.is_dir():
        path = RunDir(run_dir).debug_log
    else:
        path = Path(tempfile.gettempdir()) / "k3rollout-debug.log"
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(tb)
    except OSError:
        sys.stderr.write(tb)
        path = None
    print(f"k3rollout: internal error; traceback {'in ' + str(path) if path else 'above'}. The journal holds every "
          f"step up to the error: `{resume}` continues the run.", file=sys.stderr)
    return EXIT_INTERNAL


_STOPPING = [False]
# the hook _main replaced with _stop_was_swallowed, put back when the command ends
_UNRAISABLE: list[Callable[[Any], object] | None] = [None]


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _stop_was_swallowed(unraisable: Any) -> None:
    """sys.unraisablehook while a stop handler is installed. Python runs a signal handler between
    any two bytecodes of the main thread, also inside a garbage-collection callback (a weakref's,
    a ``__del__``); an exception raised there is handed to this hook and dropped, and the stop's
    KeyboardInterrupt with it: `observe` went on with its passes after SIGTERM. That one is sent
    again to the main thread, from another thread, so that it lands once the callback has
    returned (one that lands in a callback again comes back here); anything else goes to the hook
    this one replaced."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _STOPPING[0]:
        _STOPPING[0] = False
        main = threading.main_thread().ident
        assert main is not None

        def again() -> None:
            time.sleep(0.05)        # a signal raised now would run its handler inside this hook
            signal.pthread_kill(main, signal.SIGTERM)

        threading.Thread(target=again, name="k3rollout-stop", daemon=True).start()
        return
    previous = _UNRAISABLE[0] or sys.__unraisablehook__
    previous(unraisable)


def _terminate(signum: int, frame: object) -> None:
    if _STOPPING[0]:
        try:
            os.write(2, b"k3rollout: already stopping: waiting for the steps in flight to finish or time out\n")
        except OSError:
            pass
        return
    _STOPPING[0] = True
    from k3rollout.runlog.journal import defer_interrupt

    if defer_interrupt():
        return                  # raised as soon as the record being written is whole
    raise KeyboardInterrupt


def entrypoint() -> None:
    sys.exit(main())
