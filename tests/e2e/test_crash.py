"""Stop the CLI at chosen journal records as a crash would, resume, and compare with an
uninterrupted run: same outcome, no destructive step run twice, nothing forgotten.

Most points stop the CLI in the test's own process (tests/support/crash.py: a journal hook
raises ``HardStop`` there, and the run leaves what a killed process leaves); a handful kill
a real CLI process with SIGKILL (tests/support/faultinject.py), chosen to cover the kinds:
before a record, a torn record, inside a reboot step, inside a rollback
(``REAL_KILLS``, and the kills before the first record). One test holds the stop in
process to what a SIGKILL at the same record leaves behind."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from support import (
    api_changes,
    assert_reports_match_journal,
    commands,
    journal,
    result,
    sim_state,
    write_inventory,
    write_playbook,
)
from support import forked_cli as cli
from support.crash import KILLED, run_cli


@contextlib.contextmanager
def environ(env: dict | None) -> Iterator[None]:
    """``env`` set in this process's environment for the block, as ``cli(env=...)`` sets it
    for the process it starts."""
    old = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def here(*args: str, env: dict | None = None, fault: tuple[str, int] | None = None):
    """The CLI in this process, answering as ``cli`` does; with ``fault`` it stops at that
    journal record as a killed process would (support/crash.py), and answers -9."""
    with environ(env):
        return run_cli(args, fault)

ONCE = re.compile(r"^(apt-get install|reboot)\b")


@functools.cache
def _scenario_texts() -> tuple[str, str]:
    """The scenario's inventory and playbook, as written once: each point's run gets the same
    bytes, written without parsing and dumping the shipped playbook again."""
    with tempfile.TemporaryDirectory() as d:
        # gpu-02 fails its smoke test (OOM) and is rolled back: the run exercises every
        # destructive step and the rollback, one node at a time so journal order is fixed
        inv = write_inventory(Path(d) / "inv", {"gpu-01": {}, "gpu-02": {"sim_faults": ["vllm_oom"]}})
        # the simulator reboots at once: a host still on its old boot id after 1 s did not reboot
        pb = write_playbook(Path(d) / "pb.yml", serial=1, min_serving=0, max_fail_percentage=100, reboot_grace=1)
        return inv.read_text(), pb.read_text()


def scenario(base: Path) -> tuple[Path, Path]:
    inv_text, pb_text = _scenario_texts()
    inv, pb = base / "inv" / "hosts.yml", base / "pb.yml"
    inv.parent.mkdir(parents=True, exist_ok=True)
    inv.write_text(inv_text)
    pb.write_text(pb_text)
    return inv, pb


def outcome(run_dir: Path) -> dict:
    r = result(run_dir)
    return {"status": r["status"],
            "nodes": {n: [v["final"], v["driver_after"], v["failed_stage"], v["triage"]] for n, v in r["nodes"].items()},
            "batches": [b["status"] for b in r["batches"]]}


TEST_POD = re.compile(r"^(POST|DELETE) namespaces/k3rollout/pods\b")     # the workload namespace
POD_NAME = re.compile(r"(?P<name>[a-z0-9-]+?)-[0-9a-f]{10}\b")     # NAME-<hash of run id, node, purpose>


def destructive(run_dir: Path, host: str) -> list[str]:
    # the host's own destructive commands, then every change asked of the Kubernetes API
    # for its node (cordon, evictions, labels, uncordon: each a ``once`` step from the
    # controller). The tool's own test pods are not the cluster's: own_pods() holds them.
    return [c.split(" --")[0].split(" nvidia")[0] for c in commands(run_dir, host) if ONCE.match(c)] + \
        [re.sub(r"-[0-9a-f]{5}/eviction$", "-<pod>/eviction", c) for c in api_changes(run_dir, host)
         if not TEST_POD.match(c)]


def own_pods(run_dir: Path, host: str) -> list[str]:
    """The creates and deletes of the tool's own check and test-server pods on ``host``,
    their run-id hash masked (each run has its own id)."""
    return [POD_NAME.sub(r"\g<name>-<hash>", c) for c in api_changes(run_dir, host) if TEST_POD.match(c)]


def pod_problems(changes: list[str]) -> list[str]:
    """A test pod is created only while none of its name exists (the create is a ``once``
    call whose probe finds a pod made before a crash) and each one is deleted in the end."""
    live: set[str] = set()
    problems = []
    for c in changes:
        verb, _, rest = c.partition(" ")
        m = re.search(r'"name": "([^"]+)"', rest) if verb == "POST" else re.search(r"/pods/(\S+)$", rest)
        name = m.group(1) if m else rest
        if verb == "POST":
            if name in live:
                problems.append(f"pod {name} created twice")
            live.add(name)
        elif name not in live:
            problems.append(f"pod {name} deleted but never created")
        else:
            live.discard(name)
    return problems + [f"pod {n} left behind" for n in sorted(live)]


def pod_failures(reference: dict, run_dir: Path, host: str, label: str) -> list[str]:
    """The tool's own test pods on ``host`` after a kill at ``label`` and a resume. A stage
    interrupted after its pod was made runs again on resume: its pod is never created while one
    of its name exists, none is left behind, the same pods are made as in the uninterrupted
    run; and killed once a test server's pod was made (its create on record, or sent and not
    yet recorded), resume finds that pod and serves from it, never creating it a second time.
    A server that ended (gpu-02's runs out of memory at load) is started again by the relaunch."""
    pods = own_pods(run_dir, host)
    failures = [f"{label}: {host} {p}" for p in pod_problems(pods)]
    if set(pods) != set(reference["test_pods"][host]):
        failures.append(f"{label}: {host} test pods {sorted(set(pods))} != {sorted(set(reference['test_pods'][host]))}")
    made = re.fullmatch(r"\d+:step_(started|done):([^:]+):[^/]+/(k3rollout-[a-z]+)-run", label)
    if made and made.group(2) == host and reference["outcome"]["nodes"][host][0] == "upgraded":
        post = f'POST namespaces/k3rollout/pods {{"metadata": {{"name": "{made.group(3)}-{host}-<hash>"}}}}'
        got, want = pods.count(post), reference["test_pods"][host].count(post)
        if got != want:
            failures.append(f"{label}: {made.group(3)} pod created {got} times, {want} in the uninterrupted run")
    return failures


def shared(tmp_path_factory, name: str, make) -> dict:
    """``make(base)``'s result, made once per test session: under xdist the first worker to
    ask runs the uninterrupted reference run and the others read what it found (the run is
    deterministic, so each worker's own would be the same, and the crash matrix's shards are
    spread over the workers). The result goes through JSON either way, so every worker
    compares against the same values; ``run_dir`` comes back as a Path."""
    import fcntl
    import json
    import os

    def load(text: str) -> dict:
        d = json.loads(text)
        return {**d, "run_dir": Path(d["run_dir"])} if "run_dir" in d else d

    def dump(d: dict) -> str:
        return json.dumps({**d, "run_dir": str(d["run_dir"])} if "run_dir" in d else d)

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return load(dump(make(tmp_path_factory.mktemp(name))))
    root = tmp_path_factory.getbasetemp().parent          # this session's, shared by its workers
    cache = root / f"k3-crash-{name}.json"
    with open(root / f"k3-crash-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not cache.exists():
            tmp = cache.with_suffix(".tmp")
            tmp.write_text(dump(make(tmp_path_factory.mktemp(name))))
            tmp.rename(cache)
        return load(cache.read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return shared(tmp_path_factory, "ref", _reference)


def _reference(base: Path) -> dict:
    inv, pb = scenario(base)
    run_dir = base / "run"
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
            env={"K3ROLLOUT_LOCK_DIR": str(base / "locks")})
    assert p.returncode == 0, p.stderr
    recs = journal(run_dir)
    return {"run_dir": run_dir, "records": recs, "outcome": outcome(run_dir),
            "destructive": {h: destructive(run_dir, h) for h in ("gpu-01", "gpu-02")},
            "test_pods": {h: own_pods(run_dir, h) for h in ("gpu-01", "gpu-02")}}


def kill_points(records: list[dict]) -> list[tuple[str, int, str]]:
    """Every destructive step (before it runs, after it is recorded, and torn mid-record),
    every rollback record, one of each transition kind, and the first record of each type."""
    points: list[tuple[str, int, str]] = []
    seen_transitions: set[tuple[str, str]] = set()
    seen_types: set[str] = set()
    for r in records:
        if r.get("kind") == "api" and r.get("step", "").startswith("upgrade-state-"):
            # progress labels are the same once-call through the API as the drain and the
            # uncordon, whose records are kill points; killing at each of them adds time, not cover
            continue
        label = f"{r['seq']}:{r['type']}:{r.get('node', '')}:{r.get('key', r.get('to', ''))}"
        first_of_type = r["type"] not in seen_types and r["type"] != "run_finished"
        seen_types.add(r["type"])
        if first_of_type and not (r["type"] in ("step_started", "step_done") and r.get("once")):
            points.append(("KILL", r["seq"], label))
        elif r["type"] in ("step_started", "step_done") and r.get("once"):
            points.append(("KILL", r["seq"], label))
            if r["type"] == "step_done":
                points.append(("TEAR", r["seq"], label))
        elif r["type"] in ("rollback_plan", "rollback_started", "rollback_done", "batch_started", "batch_done",
                           "triage"):
            points.append(("KILL", r["seq"], label))
        elif r["type"] == "node_state" and (r["from"], r["to"]) not in seen_transitions:
            seen_transitions.add((r["from"], r["to"]))
            points.append(("KILL", r["seq"], label))
    return points


def test_reference_run_has_the_shape_the_matrix_needs(reference):
    o = reference["outcome"]
    assert o["nodes"]["gpu-01"][0] == "upgraded" and o["nodes"]["gpu-02"][0] == "rolled_back"
    assert reference["destructive"]["gpu-02"].count("reboot") == 2
    points = kill_points(reference["records"])
    assert len(points) >= 35
    kinds = {label.split(":")[1] for _, _, label in points}
    assert {"run_started", "stage_started", "facts", "assertions", "evidence", "stage_done", "triage",
            "rollback_plan", "rollback_started", "rollback_done", "batch_done", "node_state"} <= kinds
    # the nodes are containerd nodes: checks and test servers are pods, and the matrix kills
    # the run right after each pod's create is on record
    for h in ("gpu-01", "gpu-02"):
        pods = reference["test_pods"][h]
        assert any(c.startswith("POST") and "smoke" in c for c in pods) and not pod_problems(pods), pods
    creates = [label for _, _, label in points if label.endswith("-run") or "-pod" in label]
    assert any(":step_done:" in c for c in creates), creates
    # among them, the create of a server that stays up (gpu-01's), which resume must find
    assert any(re.search(r":step_done:gpu-01:[^/]+/k3rollout-smoke-run$", c) for c in creates), creates
    assert pod_problems(['POST namespaces/k3rollout/pods {"metadata": {"name": "a-<hash>"}}'] * 2) == \
        ["pod a-<hash> created twice", "pod a-<hash> left behind"]


def check_point(reference: dict, mode: str, seq: int, label: str, base: Path, run: Callable = here) -> list[str]:
    """Crash a fresh run at one journal record, resume it, compare with the reference.
    ``run`` starts the CLI: ``here`` (in this process) or ``cli`` (a process, SIGKILLed)."""
    failures: list[str] = []
    inv, pb = scenario(base)
    run_dir = base / "run"
    locks = {"K3ROLLOUT_LOCK_DIR": str(base / "locks")}
    p = run("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), env=locks, fault=(mode, seq))
    if p.returncode != KILLED:
        return [f"{label}: expected SIGKILL, got {p.returncode}"]
    if seq % 5 == 0 or run is cli:
        # while the crashed run holds the lock, a new run on the cluster is refused
        other = run("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(base / "other"), "--no-preflight",
                    env=locks)
        if other.returncode != 1 or "stale" not in other.stderr:
            failures.append(f"{label}: second run not refused as stale: {other.stderr[-300:]}")
    r = run("resume", str(run_dir), env=locks)
    if r.returncode != 0:
        return failures + [f"{label}: resume -> {r.returncode}: {r.stderr[-500:]}"]
    got = outcome(run_dir)
    if got != reference["outcome"]:
        failures.append(f"{label}: outcome {got} != {reference['outcome']}")
    for h in ("gpu-01", "gpu-02"):
        d = destructive(run_dir, h)
        if d != reference["destructive"][h]:
            failures.append(f"{label}: {h} destructive steps {d} != {reference['destructive'][h]}")
        failures += pod_failures(reference, run_dir, h, label)
    # no node is left out of service without a record saying so
    for h, v in result(run_dir)["nodes"].items():
        sched = sim_state(run_dir, h)["scheduler"]["state"]
        if (sched == "schedulable") != (v["final"] in ("upgraded", "rolled_back", "pending")):
            failures.append(f"{label}: {h} is {sched} but its result says {v['final']}")
    recs = journal(run_dir)
    if [x["seq"] for x in recs] != list(range(1, len(recs) + 1)):
        failures.append(f"{label}: journal sequence has a gap")
    # a once step whose completion was on record before the kill is replayed from the
    # journal on resume: never probed again (its probe would answer, but ask the node twice)
    # (KILL stops right after record ``seq`` is written, TEAR tears it)
    last_kept = seq if mode == "KILL" else seq - 1
    done_before = {(x.get("node"), x["key"]) for x in recs
                   if x["type"] == "step_done" and x.get("once") and x["seq"] <= last_kept}
    reprobed = [x["key"] for x in recs if x["type"] == "step_settled" and (x.get("node"), x["key"]) in done_before]
    if reprobed:
        failures.append(f"{label}: completed once step(s) probed again on resume: {reprobed}")
    if mode == "TEAR":
        if not any(x["type"] == "journal_repaired" for x in recs) or not list(run_dir.glob("journal.torn.*")):
            failures.append(f"{label}: torn line not detected and kept")
    if not (run_dir / "report.html").exists():
        failures.append(f"{label}: no report after resume")
    else:
        try:
            assert_reports_match_journal(run_dir)
        except AssertionError as exc:
            failures.append(f"{label}: {exc}")
    return failures


def real_kills(records: list[dict]) -> list[tuple[str, int, str]]:
    """The matrix's points where a real process is killed with SIGKILL, one of each kind:
    the reboot run and its completion not on record (BEFORE its done record), a package
    install's done record torn mid-write, and the rollback's reboot announced and not run
    (the kills before the first record are test_a_run_killed_before_its_first_record_...)."""
    def seq(node: str, step: str, rtype: str) -> int:
        return next(r["seq"] for r in records if r["type"] == rtype and r.get("node") == node
                    and r.get("key", "").endswith("/" + step))

    install = next(r["key"].rpartition("/")[2] for r in records if r["type"] == "step_started"
                   and r.get("node") == "gpu-01" and " ".join(r.get("argv", [])).startswith("apt-get install"))
    points = [("BEFORE", "gpu-01", "reboot", "step_done"), ("TEAR", "gpu-01", install, "step_done"),
              ("KILL", "gpu-02", "restore-reboot", "step_started")]
    return [(mode, seq(node, step, rtype), f"{mode}:{node}:{step}:{rtype}") for mode, node, step, rtype in points]


SHARDS = 4


@pytest.mark.long
@pytest.mark.preflight          # the crashed runs as the reference ran: with the preflight
@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_kill_point_resumes_to_the_same_result(reference, tmp_path, shard):
    # every kill point, stopped in this process, split in shards so the test workers share
    # them (shard k takes every SHARDS-th point from k: together they cover each point once)
    points = kill_points(reference["records"])[shard::SHARDS]
    failures = [f for pt in points for f in check_point(reference, *pt, tmp_path / f"{pt[0]}-{pt[1]}")]
    assert not failures, "\n".join(failures)


def test_the_real_kills_cover_a_reboot_a_torn_record_and_a_rollback(reference):
    points = real_kills(reference["records"])
    recs = {r["seq"]: r for r in reference["records"]}
    assert [(m, recs[s]["type"], recs[s]["once"]) for m, s, _ in points] == [
        ("BEFORE", "step_done", True), ("TEAR", "step_done", True), ("KILL", "step_started", True)]
    assert recs[points[0][1] - 1]["argv"][0] == "reboot" and recs[points[0][1] - 1]["node"] == "gpu-01"
    assert recs[points[1][1] - 1]["argv"][:2] == ["apt-get", "install"]
    assert recs[points[2][1]]["argv"][0] == "reboot"
    assert any(r["type"] == "rollback_started" and r["seq"] < points[2][1] for r in reference["records"])


@pytest.mark.parametrize("index", range(3))
def test_a_real_sigkill_at_a_point_of_each_kind_resumes_to_the_same_result(reference, tmp_path, index):
    pt = real_kills(reference["records"])[index]
    failures = check_point(reference, *pt, tmp_path, run=cli)
    assert not failures, "\n".join(failures)


def _left_behind(run_dir: Path, locks: Path) -> dict:
    """What a crashed run left: its journal (torn tail and all), the files of its run
    directory (the simulated hosts aside), and its lock files with whether their holder lives."""
    import json

    from k3rollout.runlog.lock import live_holders

    files = sorted(str(f.relative_to(run_dir)) for f in run_dir.rglob("*")
                   if f.is_file() and "sim-hosts" not in f.parts)
    raw = (run_dir / "journal.jsonl").read_bytes()
    whole = raw[:raw.rfind(b"\n") + 1]
    holders = [json.loads(f.read_text()) for f in sorted(locks.glob("*.lock"))]
    return {"records": [(r["seq"], r["type"], r.get("key")) for r in map(json.loads, whole.splitlines())],
            "torn": whole != raw, "files": files,
            "locks": [(h["key"], h["run_dir"] == str(run_dir.resolve())) for h in holders],
            "live_holders": live_holders(run_dir, locks)}


@pytest.mark.preflight
@pytest.mark.parametrize("mode,which", [("TEAR", "step_done"), ("KILL", "rollback_started")])
def test_a_stop_in_process_leaves_what_a_sigkill_leaves(reference, tmp_path, mode, which):
    """The same point stopped in process and killed for real: the same records and torn
    tail, the same files in the run directory (result.json and the reports only as a batch's
    end wrote them, none written at the stop), the same lock files, each held by a dead
    process."""
    seq = next(r["seq"] for r in reference["records"] if r["type"] == which
               and (which != "step_done" or r.get("key", "").endswith("/reboot")))
    left = {}
    for name, run in (("process", cli), ("here", here)):
        inv, pb = scenario(tmp_path / name)
        run_dir, locks = tmp_path / name / "run", tmp_path / name / "locks"
        p = run("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
                env={"K3ROLLOUT_LOCK_DIR": str(locks)}, fault=(mode, seq))
        assert p.returncode == KILLED, p.stderr[-800:]
        left[name] = _left_behind(run_dir, locks)
    assert left["here"] == left["process"]
    got = left["here"]
    assert got["records"][-1][0] == (seq - 1 if mode == "TEAR" else seq) and got["torn"] == (mode == "TEAR")
    batch_ended = any(r["type"] == "batch_done" and r["seq"] < seq for r in reference["records"])
    assert ("result.json" in got["files"]) == batch_ended and ("report.html" in got["files"]) == batch_ended
    assert got["locks"] and all(mine for _, mine in got["locks"])
    assert got["live_holders"] == []           # every lock file names a process that is gone


def test_damaged_journal_middle_is_refused_with_its_line(reference, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(reference["run_dir"], run_dir)
    lines = (run_dir / "journal.jsonl").read_text().splitlines(keepends=True)
    lines[5] = lines[5][:10] + "\n"
    (run_dir / "journal.jsonl").write_text("".join(lines))
    p = cli("resume", str(run_dir), env={"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")})
    assert p.returncode == 2
    assert "journal.jsonl:6:" in p.stderr and "damaged" in p.stderr


def _first(records: list[dict], host: str, step: str) -> int:
    return next(r["seq"] for r in records if r["type"] == "step_started" and r.get("node") == host
                and r.get("once") and r["step"] == step)


def _same_as_reference(reference: dict, run_dir: Path) -> None:
    assert outcome(run_dir) == reference["outcome"]
    for h in ("gpu-01", "gpu-02"):
        assert destructive(run_dir, h) == reference["destructive"][h], h
    assert_reports_match_journal(run_dir)


def test_a_start_record_cut_short_stops_before_the_reboot(reference, tmp_path):
    """A full disk in the middle of the reboot's start record: the reboot does not run, the
    message says the journal is intact, and resume reboots once, not twice."""
    inv, pb = scenario(tmp_path)
    run_dir = tmp_path / "run"
    seq = _first(reference["records"], "gpu-01", "reboot")
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), fault=("SHORT", seq))
    assert p.returncode == 70, p.stderr
    assert f"could not write record {seq}" in p.stderr and "The journal is intact" in p.stderr
    assert f"k3rollout resume {run_dir}" in p.stderr and "Traceback" not in p.stderr
    assert "reboot" not in destructive(run_dir, "gpu-01")
    assert journal(run_dir)[-1]["seq"] == seq - 1
    r = cli("resume", str(run_dir))
    assert r.returncode == 0, r.stderr
    _same_as_reference(reference, run_dir)


@pytest.mark.parametrize("preflight", [True, False], ids=["preflight", "no-preflight"])
def test_a_file_size_limit_stops_the_run_cleanly_and_resume_finishes(reference, tmp_path, preflight):
    """`prlimit --fsize`: whatever file reaches the limit first, the run stops with one message
    naming the file system (no traceback, exit 70). With the preflight the first file to
    reach it is the preflight's report, before the run's first record: nothing changed, the
    message says to run again, and a run once the limit is lifted finishes as an uninterrupted
    one. Without it the journal reaches it mid-run: the message names the resume command, no
    destructive step runs twice, and resume finishes as an uninterrupted run."""
    import os
    import resource
    import subprocess
    import sys

    from support import ROOT

    inv, pb = scenario(tmp_path)
    run_dir = tmp_path / "run"

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (35200, 35200))

    argv = [sys.executable, "-m", "k3rollout", "run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]
    p = subprocess.run(argv + ([] if preflight else ["--no-preflight"]), cwd=ROOT, env=os.environ,
                       capture_output=True, text=True, timeout=300, preexec_fn=limit)
    assert p.returncode == 70, p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("k3rollout: error:") == 1, p.stderr
    assert "File too large" in p.stderr and "mounted at" in p.stderr, p.stderr
    assert not (run_dir / "debug.log").exists()
    if preflight:
        assert "nothing was changed" in p.stderr and "run it again" in p.stderr and "resume" not in p.stderr
        assert not (run_dir / "journal.jsonl").exists()
        again = tmp_path / "again"
        r = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(again))
        assert r.returncode == 0, r.stderr
        _same_as_reference(reference, again)
        return
    assert f"k3rollout resume {run_dir}" in p.stderr
    r = cli("resume", str(run_dir))
    assert r.returncode == 0, r.stderr
    _same_as_reference(reference, run_dir)


@pytest.mark.parametrize("mode", ["BEFORE", "TEAR"])
def test_a_run_killed_before_its_first_record_is_released_by_resume(tmp_path, mode):
    inv, pb = scenario(tmp_path)
    run_dir = tmp_path / "run"
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), fault=(mode, 1))
    assert p.returncode == -9
    other = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(tmp_path / "other"))
    assert other.returncode == 1 and "stale" in other.stderr and f"k3rollout resume {run_dir.resolve()}" in other.stderr
    r = cli("resume", str(run_dir))
    assert r.returncode == 1 and "never started" in r.stderr and "nothing was changed" in r.stderr, r.stderr
    assert "Released its stale cluster lock" in r.stderr
    assert (run_dir / "journal.torn.0").exists() == (mode == "TEAR")     # the torn record is kept aside
    again = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir))
    assert again.returncode == 0, again.stderr


def _rechain(lines: list[bytes]) -> bytes:
    """Recompute every link, as someone who knows the chain would after an edit."""
    from k3rollout.runlog.journal import LINK_TAIL, chain

    out, prev = [], ""
    for line in lines:
        body = line.rstrip(b"\n")[:-LINK_TAIL] + b"}"
        prev = chain(prev, body)
        out.append(body[:-1] + b',"h":"' + prev.encode() + b'"}\n')
    return b"".join(out)


def test_a_damaged_record_key_is_refused_with_its_line_by_resume_report_and_rollback(reference, tmp_path):
    run_dir = tmp_path / "copy"
    shutil.copytree(reference["run_dir"], run_dir)
    lines = (run_dir / "journal.jsonl").read_bytes().splitlines(keepends=True)
    i = next(i for i, r in enumerate(reference["records"]) if r["type"] == "node_state")
    lines[i] = lines[i].replace(b'"node":', b'"nodf":', 1)
    (run_dir / "journal.jsonl").write_bytes(_rechain(lines))
    for verb in (["resume"], ["report"], ["rollback", "--batch", "1"]):
        p = cli(*verb, str(run_dir))
        assert p.returncode == 2, (verb, p.stderr)
        assert f"journal.jsonl:{i + 1}:" in p.stderr and "lacks 'node'" in p.stderr and "intact" not in p.stderr


def test_tampered_evidence_is_caught_by_report_and_resume(reference, tmp_path):
    """An evidence file edited or deleted, or the manifest deleted: `report` exits 2 naming
    the file and line and marks the checklist items that evidence backs as not proven;
    `resume` refuses to go on."""
    import json

    ref = reference["run_dir"]
    plan_ev = next(r["path"] for r in reference["records"] if r["type"] == "evidence" and r["name"] == "rollback-plan")
    listed = (ref / "evidence" / "MANIFEST.sha256").read_text().splitlines()
    line = next(i for i, x in enumerate(listed, start=1) if x.endswith("  " + plan_ev))

    def copy(name: str) -> Path:
        d = tmp_path / name
        shutil.copytree(ref, d)
        return d

    edited = copy("edited")
    f = edited / "evidence" / plan_ev
    f.chmod(0o644)
    f.write_text(f.read_text().replace("575.57.08", "570.00.01"))
    deleted = copy("deleted")
    (deleted / "evidence" / plan_ev).unlink()
    no_manifest = copy("no-manifest")
    (no_manifest / "evidence" / "MANIFEST.sha256").unlink()
    for run_dir, where in ((edited, f"evidence/MANIFEST.sha256:{line}: {plan_ev}: content changed"),
                           (deleted, f"evidence/MANIFEST.sha256:{line}: {plan_ev}: file missing"),
                           (no_manifest, "evidence/MANIFEST.sha256: missing")):
        p = cli("report", str(run_dir))
        assert p.returncode == 2 and where in p.stderr, p.stderr
        items = {i["item"]: i for i in json.loads((run_dir / "report.json").read_text())["checklist"]}
        assert items[10]["status"] == "not proven" and plan_ev in items[10]["detail"]
        if run_dir is no_manifest:
            assert all(i["status"] == "not proven" for i in items.values() if i["evidence"])
        else:
            assert items[3]["status"] == "done"             # evidence that still verifies still counts
        assert "does not verify" in (run_dir / "report.md").read_text()
        r = cli("resume", str(run_dir))
        assert r.returncode == 2 and where in r.stderr, r.stderr
    clean = cli("report", str(copy("clean")))
    assert clean.returncode == 0, clean.stderr


@pytest.mark.parametrize("forks", [8, 1])
def test_a_second_signal_waits_for_the_steps_in_flight(tmp_path, forks):
    """TERM, then TERM again 0.1 s later, in a batch worked in parallel or one node at a time:
    no new step starts, the ones in flight finish and are journaled, and only then are the
    journal and evidence closed. The journal and the evidence verify, and resume finishes
    the run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from support import ROOT

    from k3rollout.runlog.journal import Journal
    from k3rollout.runlog.rundir import RunDir

    hosts = {f"gpu-{i:02d}": {"sim_latency_s": 0.02} for i in range(1, 9)}
    inv = write_inventory(tmp_path / "inv", hosts)
    pb = write_playbook(tmp_path / "pb.yml", serial=8, forks=forks, min_serving=0)
    run_dir = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "k3rollout", "run", str(pb), "-i", str(inv), "--yes", "--run-dir",
                          str(run_dir)], cwd=ROOT, env=os.environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    j = run_dir / "journal.jsonl"
    while time.time() < deadline and not (j.exists() and j.read_bytes().count(b"\n") > 150):
        time.sleep(0.02)
    p.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=600)
    assert p.returncode == 1, err.decode()[-2000:]
    recs = Journal.read(j)
    assert RunDir(run_dir).verify(recs) == []
    open_steps = {(r["node"], r["key"]) for r in recs if r["type"] == "step_started"}
    for r in recs:
        if r["type"] in ("step_done", "step_error", "step_settled"):
            open_steps.discard((r["node"], r["key"]))
    assert open_steps == set(), "steps in flight were cut off unrecorded"
    assert not list((tmp_path / "locks").glob("*.lock"))
    r = cli("resume", str(run_dir))
    assert r.returncode == 0, r.stderr[-2000:]
    assert {n["final"] for n in result(run_dir)["nodes"].values()} == {"upgraded"}
    assert RunDir(run_dir).verify(Journal.read(j)) == []


def test_a_full_disk_gives_one_message_and_exit_70_and_resume_works_after(reference, tmp_path, capsys):
    """Evidence, reports and debug.log all on the full disk: one message naming the file
    system and the run directory, exit 70, the resume command; no chained traceback."""
    import errno

    from k3rollout import cli as k3cli
    from k3rollout.engine import session
    from k3rollout.evidence.store import EvidenceStore

    inv, pb = scenario(tmp_path)
    run_dir = tmp_path / "run"
    real_write = EvidenceStore.write
    calls = [0]

    def write(self, *a, **kw):
        calls[0] += 1
        if calls[0] > 30:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.root / "x.txt"))
        return real_write(self, *a, **kw)

    def no_space(*a, **kw):
        raise OSError(errno.ENOSPC, "No space left on device", str(run_dir / "report.html.tmp"))

    real_open = open

    def open_(path, *a, **kw):
        if str(path).endswith("debug.log"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, *a, **kw)

    # the full disk only for the run: its own patches, undone alone (monkeypatch.undo() would
    # also undo the test's own lock folder, and resume would then meet other runs' host locks)
    with pytest.MonkeyPatch.context() as full:
        full.setattr(EvidenceStore, "write", write)
        full.setattr(session, "write_reports", no_space)
        full.setattr("builtins.open", open_)
        code = k3cli.main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), "--plain"])
    err = capsys.readouterr().err
    assert code == 70
    assert "Traceback" not in err and err.count("k3rollout: error:") == 1, err
    assert "No space left on device" in err and "mounted at" in err and str(run_dir.resolve()) in err
    assert f"k3rollout resume {run_dir}" in err
    r = cli("resume", str(run_dir))
    assert r.returncode == 0, r.stderr
    assert outcome(run_dir) == reference["outcome"]


# ---------------------------------------------------------------- the GPU Operator backend's API calls

OPERATOR_POOL = "driver.config"


def operator_scenario(base: Path) -> tuple[Path, Path]:
    # gpu-01 is upgraded by moving it into the r580 pool; on gpu-02 the operator reports
    # upgrade-failed and the rollback moves it back to r575: every label move and watch runs
    op = {"sim_gpu_operator": True, "sim_gpu_operator_state_s": 0.03, "k3_driver_backend": "gpu-operator",
          "k3_gpu_operator_pool_label": OPERATOR_POOL, "k3_gpu_operator_pool": "r580"}
    inv = write_inventory(base / "inv", {"gpu-01": dict(op), "gpu-02": {**op, "sim_faults": ["gpu_operator_upgrade_fails"]}})
    pb = write_playbook(base / "pb.yml", serial=1, min_serving=0, max_fail_percentage=100,
                        stage_with={"driver_upgrade": {"operator_timeout": "30s"}})
    return inv, pb


def own_changes(run_dir: Path, host: str) -> list[str]:
    """What this run asked of the API for ``host`` (the operator's own label and pod changes
    left out: its progression runs on its own clock)."""
    return [re.sub(r"-[0-9a-f]{5}/eviction$", "-<pod>/eviction", c) for c in api_changes(run_dir, host)
            if "nvidia.com/gpu-driver-upgrade" not in c and "nvidia-driver-daemonset" not in c
            and not TEST_POD.match(c)]


@pytest.fixture(scope="module")
def operator_reference(tmp_path_factory):
    return shared(tmp_path_factory, "opref", _operator_reference)


def _operator_reference(base: Path) -> dict:
    inv, pb = operator_scenario(base)
    run_dir = base / "run"
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
            env={"K3ROLLOUT_LOCK_DIR": str(base / "locks")})
    assert p.returncode == 0, p.stderr        # completed: gpu-02 failed and was rolled back
    return {"records": journal(run_dir), "outcome": outcome(run_dir),
            "changes": {h: own_changes(run_dir, h) for h in ("gpu-01", "gpu-02")},
            "test_pods": {h: own_pods(run_dir, h) for h in ("gpu-01", "gpu-02")},
            "pools": {h: sim_state(run_dir, h)["scheduler"]["labels"][OPERATOR_POOL] for h in ("gpu-01", "gpu-02")}}


def operator_kill_points(records: list[dict]) -> list[tuple[str, int, str]]:
    """Around each label move: the PATCH sent but its outcome not recorded (BEFORE the done
    record), recorded (KILL), torn (TEAR); and in the middle of each watch."""
    def seq(node: str, step: str, rtype: str) -> int:
        return next(r["seq"] for r in records if r["type"] == rtype and r.get("node") == node
                    and r.get("kind") == "api" and r.get("step") == step)

    points = [("BEFORE", "gpu-01", "operator-upgrade-pool", "step_done"),
              ("KILL", "gpu-01", "operator-upgrade-watch", "step_started"),
              ("KILL", "gpu-02", "operator-upgrade-watch", "step_started"),
              ("BEFORE", "gpu-02", "restore-operator-pool", "step_done"),
              ("TEAR", "gpu-02", "restore-operator-pool", "step_done"),
              ("KILL", "gpu-02", "restore-operator-watch", "step_started")]
    return [(mode, seq(node, step, rtype), f"{mode}:{node}:{step}:{rtype}") for mode, node, step, rtype in points]


def check_operator_point(reference: dict, mode: str, seq: int, label: str, base: Path) -> list[str]:
    inv, pb = operator_scenario(base)
    run_dir = base / "run"
    locks = {"K3ROLLOUT_LOCK_DIR": str(base / "locks")}
    p = here("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), env=locks, fault=(mode, seq))
    if p.returncode != KILLED:
        return [f"{label}: expected SIGKILL, got {p.returncode}"]
    r = here("resume", str(run_dir), env=locks)
    if r.returncode != 0:
        return [f"{label}: resume -> {r.returncode}: {r.stderr[-500:]}"]
    failures = []
    if outcome(run_dir) != reference["outcome"]:
        failures.append(f"{label}: outcome {outcome(run_dir)} != {reference['outcome']}")
    for h in ("gpu-01", "gpu-02"):
        # each label move (and cordon, eviction, uncordon) asked once: none repeated or lost
        if own_changes(run_dir, h) != reference["changes"][h]:
            failures.append(f"{label}: {h} changes {own_changes(run_dir, h)} != {reference['changes'][h]}")
        failures += pod_failures(reference, run_dir, h, label)
        s = sim_state(run_dir, h)
        if s["scheduler"]["labels"][OPERATOR_POOL] != reference["pools"][h]:
            failures.append(f"{label}: {h} ends in pool {s['scheduler']['labels'][OPERATOR_POOL]}")
        if s["boots"] != 0:
            failures.append(f"{label}: {h} was rebooted")
    try:
        assert_reports_match_journal(run_dir)
    except AssertionError as exc:
        failures.append(f"{label}: {exc}")
    return failures


@pytest.mark.preflight
@pytest.mark.parametrize("shard", range(2))
def test_a_crash_around_the_gpu_operator_label_moves_and_watches_resumes_to_the_same_result(operator_reference,
                                                                                              tmp_path, shard):
    assert operator_reference["pools"] == {"gpu-01": "r580", "gpu-02": "r575"}
    assert [c for c in operator_reference["changes"]["gpu-02"] if OPERATOR_POOL in c] == [
        f'PATCH nodes/gpu-02 {{"metadata": {{"labels": {{"{OPERATOR_POOL}": "r580"}}}}}}',
        f'PATCH nodes/gpu-02 {{"metadata": {{"labels": {{"{OPERATOR_POOL}": "r575"}}}}}}']
    points = operator_kill_points(operator_reference["records"])[shard::2]
    failures = [f for pt in points for f in check_operator_point(operator_reference, *pt, tmp_path / f"{pt[0]}-{pt[1]}")]
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------- a crash in a RHEL module stream switch

RHEL_STAGES = ("baseline", "cordon", "driver_upgrade", "cuda_check", "uncordon")


def driver_only_playbook(base: Path) -> Path:
    """One node at a time through the driver change and CUDA's check only (RHEL_STAGES)."""
    pb = write_playbook(base / "pb.yml", serial=1, min_serving=0, max_fail_percentage=100, reboot_grace=1)
    data = yaml.safe_load(pb.read_text())
    data[0]["stages"] = [s for s in data[0]["stages"] if s["stage"] in RHEL_STAGES]
    pb.write_text(yaml.safe_dump(data, sort_keys=False))
    return pb


def rhel_scenario(base: Path) -> tuple[Path, Path]:
    # a RHEL 9 node whose CUDA init fails on 580: the upgrade leaves the 575-open stream
    # (dnf module reset, then enable 580-open) and the rollback switches back
    inv = write_inventory(base / "inv", {"rh-01": {"ansible_os_family": "RedHat", "sim_faults": ["cuda_init_fails"],
                                                   "sim_held_packages": ["nvidia-driver"]}})
    return inv, driver_only_playbook(base)


def rhel_changes(run_dir: Path) -> list[str]:
    """What changed the node's packages or its module stream, in order."""
    return [c for c in commands(run_dir, "rh-01") if c.startswith(("dnf install", "dnf -y module", "reboot"))]


@pytest.fixture(scope="module")
def rhel_reference(tmp_path_factory):
    return shared(tmp_path_factory, "rhel-ref", _rhel_reference)


def _rhel_reference(base: Path) -> dict:
    inv, pb = rhel_scenario(base)
    run_dir = base / "run"
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
            env={"K3ROLLOUT_LOCK_DIR": str(base / "locks")})
    assert p.returncode == 0, p.stderr
    st = sim_state(run_dir, "rh-01")
    assert result(run_dir)["nodes"]["rh-01"]["final"] == "rolled_back"
    assert st["module_stream"] == "575-open" and st["version_locks"] == ["nvidia-driver-3:575.57.08-1.el9.*"]
    return {"records": journal(run_dir), "outcome": outcome(run_dir), "changes": rhel_changes(run_dir),
            "state": {k: st[k] for k in ("packages", "module_stream", "version_locks", "loaded_driver")}}


def _module_points(records: list[dict]) -> list[tuple[str, int, str]]:
    """Kill points in each `dnf module` step: right after the start of the upgrade's reset and
    enable (re-run on resume), and after the start and the end of the rollback's (``once``:
    settled by the stream enabled on the node)."""
    starts = {r["key"]: r for r in records if r["type"] == "step_started" and r.get("node") == "rh-01"
              and " ".join(r.get("argv", [])).startswith("dnf -y module")}
    return [("KILL", r["seq"], f"{r['seq']}:{r['type']}:{r['key']}") for r in records
            if r.get("node") == "rh-01" and r.get("key") in starts
            and (r["type"] == "step_started" or (r["type"] == "step_done" and r.get("once")))]


def test_the_module_switch_has_kill_points_in_upgrade_and_rollback(rhel_reference):
    pts = _module_points(rhel_reference["records"])
    assert len(pts) == 6, pts           # reset and enable: started in the upgrade; started and done in the rollback
    assert sum(1 for p in pts if ":step_done:" in p[2]) == 2
    ref = rhel_reference["changes"]
    assert ref[:2] == ["dnf -y module reset nvidia-driver", "dnf -y module enable nvidia-driver:580-open"]
    assert "dnf -y module enable nvidia-driver:575-open" in ref


@pytest.mark.preflight
@pytest.mark.parametrize("index", range(6))
def test_a_crash_in_a_rhel_module_switch_resumes_to_the_same_result(rhel_reference, tmp_path, index):
    mode, seq, label = _module_points(rhel_reference["records"])[index]
    inv, pb = rhel_scenario(tmp_path)
    run_dir = tmp_path / "run"
    locks = {"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    p = here("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), env=locks, fault=(mode, seq))
    assert p.returncode == KILLED, (label, p.stderr[-500:])
    r = here("resume", str(run_dir), env=locks)
    assert r.returncode == 0, (label, r.stderr[-800:])
    assert outcome(run_dir) == rhel_reference["outcome"], label
    st = sim_state(run_dir, "rh-01")
    assert {k: st[k] for k in rhel_reference["state"]} == rhel_reference["state"], label
    # nothing destructive ran twice: each install and reboot once, as in the uninterrupted
    # run; a module command may be sent again only where it was cut off (it changes nothing
    # the second time)
    got = rhel_changes(run_dir)
    for kind in ("dnf install", "reboot"):
        assert [c for c in got if c.startswith(kind)] == [c for c in rhel_reference["changes"] if c.startswith(kind)]
    assert [c for c in dict.fromkeys(got)] == [c for c in dict.fromkeys(rhel_reference["changes"])], label
    assert_reports_match_journal(run_dir)


# ---------------------------------------------------------------- a crash while the rollback writes back module options

OPTIONS = 'NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"'


def options_scenario(base: Path) -> tuple[Path, Path]:
    # the upgrade's reinstall drops the node's nvidia options file and CUDA fails on 580: the
    # rollback writes the file back (a ``once`` step) before its reboot
    inv = write_inventory(base / "inv", {"op-01": {"sim_nvidia_module_options": OPTIONS,
                                                   "sim_faults": ["driver_params_lost", "cuda_init_fails"]}})
    return inv, driver_only_playbook(base)


def options_changes(run_dir: Path) -> list[str]:
    return [c for c in commands(run_dir, "op-01") if c.startswith(("apt-get install", "tee ", "reboot"))]


@pytest.fixture(scope="module")
def options_reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("options-ref")
    inv, pb = options_scenario(base)
    run_dir = base / "run"
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
            env={"K3ROLLOUT_LOCK_DIR": str(base / "locks")})
    assert p.returncode == 0, p.stderr
    assert result(run_dir)["nodes"]["op-01"]["final"] == "rolled_back"
    records = journal(run_dir)
    write = [r for r in records if r.get("key", "").endswith("/module-options-restore-1")]
    assert [r["type"] for r in write] == ["step_started", "step_done"] and write[0]["once"]
    return {"records": write, "outcome": outcome(run_dir), "changes": options_changes(run_dir),
            "modprobe_d": sim_state(run_dir, "op-01")["modprobe_d"]}


@pytest.mark.preflight
@pytest.mark.parametrize("mode,which", [("KILL", "step_started"), ("TEAR", "step_done")])
def test_a_crash_while_the_rollback_writes_back_module_options_resumes_to_the_same_result(options_reference,
                                                                                         tmp_path, mode, which):
    seq = next(r["seq"] for r in options_reference["records"] if r["type"] == which)
    inv, pb = options_scenario(tmp_path)
    run_dir = tmp_path / "run"
    locks = {"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    p = here("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), env=locks, fault=(mode, seq))
    assert p.returncode == KILLED, p.stderr[-500:]
    r = here("resume", str(run_dir), env=locks)
    assert r.returncode == 0, r.stderr[-800:]
    assert outcome(run_dir) == options_reference["outcome"]
    assert sim_state(run_dir, "op-01")["modprobe_d"] == options_reference["modprobe_d"]
    # written once (a write cut off before it ran is sent on resume; one that ran is settled
    # by the file's content, never sent again), and before the restore's reboot
    assert options_changes(run_dir) == options_reference["changes"]
    settled = [x for x in journal(run_dir) if x["type"] == "step_settled"
               and x["key"].endswith("/module-options-restore-1")]
    assert [x["took_effect"] for x in settled] == ([True] if mode == "TEAR" else [False])
    assert_reports_match_journal(run_dir)


@pytest.mark.preflight
def test_a_pod_created_before_a_kill_is_found_on_resume_not_created_twice(tmp_path):
    """On a containerd node (k3_workload_backend: kubernetes) cuda_check's CUDA-init Pod is
    created by a ``once`` step with a probe. Killed after the POST and before its completion is
    on record, resume finds the Pod by its deterministic name: one create in the API server's
    audit log, the same outcome as the uninterrupted run."""
    b300 = {"sim_container_runtime": "containerd", "k3_workload_backend": "kubernetes",
            "k3_gpu_model": "NVIDIA B300 SXM6 AC", "k3_gpu_count": 8, "k3_gpu_mem_gib": 268,
            "sim_k8s_serving": {"kind": "Deployment", "name": "k3-b300"}}

    def go(base: Path, fault: tuple[str, int] | None) -> Path:
        inv = write_inventory(base / "inv", {"gpu-b01": b300})
        pb = write_playbook(base / "pb.yml", serial=1, min_serving=0, reboot_grace=1)
        run_dir = base / "run"
        env = {"K3ROLLOUT_LOCK_DIR": str(base / "locks")}
        p = here("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), env=env, fault=fault)
        if fault is None:
            assert p.returncode == 0, p.stderr
        else:
            assert p.returncode == KILLED, p.stderr
            r = here("resume", str(run_dir), env=env)
            assert r.returncode == 0, r.stderr
        return run_dir

    def creates(run_dir: Path) -> list[str]:
        # pod names end in a hash of the run id: the purpose and node before it
        return [re.sub(r"-[0-9a-f]{10}\"", '"', c) for c in api_changes(run_dir, "gpu-b01")
                if c.startswith("POST namespaces/k3rollout/pods")]

    ref = go(tmp_path / "ref", None)
    done = next(r for r in journal(ref) if r["type"] == "step_done" and r.get("key", "").endswith("/cuda-init-pod"))
    assert done["once"]
    crashed = go(tmp_path / "crash", ("BEFORE", done["seq"]))
    assert outcome(crashed) == outcome(ref)
    settled = [r for r in journal(crashed) if r["type"] == "step_settled" and r["key"].endswith("/cuda-init-pod")]
    assert [r["took_effect"] for r in settled] == [True]
    # the pod created before the kill was found, not created again
    assert [c for c in creates(crashed) if "cuda-init-gpu-b01" in c] == \
        ['POST namespaces/k3rollout/pods {"metadata": {"name": "cuda-init-gpu-b01"}}']
    # the rest as uninterrupted, but for the read-only nvidia-smi check pod: it ended and was
    # deleted before the kill, and the resumed cuda_check runs it again for its result
    ref_creates = creates(ref)
    assert "container-nvidia-smi" in ref_creates[0] and "cuda-init" in ref_creates[1]
    assert creates(crashed) == ref_creates[:2] + ref_creates[:1] + ref_creates[2:]
