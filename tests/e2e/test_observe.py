"""``k3rollout observe``: the run's read-only checks after the window, journaled as
observations, compared with the run's evidence, and a keep / stay isolated / roll back
recommendation in the report. Small simulated clusters and ``--once`` keep these quick."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import (
    DEFAULT_GPU,
    DOCKER_HOST,
    ROOT,
    api_changes,
    assert_reports_match_journal,
    journal,
    result,
    sim_state,
    write_inventory,
    write_playbook,
)

from k3rollout.cli import main

# the team's serving replica: prefix caching and tool calls on, as the recipe asks
SERVING = ["moonshotai/Kimi-K2-Thinking", "--tensor-parallel-size", "8", "--trust-remote-code",
           "--enable-prefix-caching", "--enable-auto-tool-choice", "--tool-call-parser", "kimi_k2", "--port", "8001"]

# what an observation pass may run on a node: queries, and throwaway --rm containers
READ_ONLY = ("nvidia-smi ", "cat /proc/driver/nvidia/version", "systemctl is-active ", "dpkg-query ", "rpm -q",
             "docker image inspect ", "docker inspect ", "docker run --rm ", "docker logs ",
             "kubectl get node ", "scontrol show ", "all_reduce_perf ", "mpirun ")


def _rollout(tmp_path: Path, hosts: dict[str, dict], **play) -> Path:
    for hv in hosts.values():
        hv.setdefault("sim_serving_args", SERVING)
    # Docker hosts: these passes read the serving container (sim_serving_args) and may run a
    # throwaway --rm container on an idle node; Pods are observed through the API instead
    inv = write_inventory(tmp_path / "inv", hosts, DOCKER_HOST)
    pb = write_playbook(tmp_path / "pb.yml", **{"serial": 1, "min_serving": 0, "max_fail_percentage": 100, **play})
    run_dir = tmp_path / "run"
    main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    return run_dir


def _ran(run_dir: Path, host: str) -> list[str]:
    """The host's command log, one entry per command (an argument may hold a newline)."""
    text = (run_dir / "sim-hosts" / host / "commands.log").read_text()
    return [e.split(" ", 1)[1] for e in re.split(r"\n(?=\d+\.\d{6} )", text.rstrip("\n"))]


def _observations(run_dir: Path) -> list[dict]:
    return [r for r in journal(run_dir) if r["type"] == "observation"]


def test_observe_once_keeps_a_good_driver_changes_nothing_and_leaves_the_run_as_it_was(tmp_path, capsys):
    run_dir = _rollout(tmp_path, {"gpu-01": {}, "gpu-02": {}})
    assert result(run_dir)["status"] == "completed"
    before = {h: len(_ran(run_dir, h)) for h in ("gpu-01", "gpu-02")}
    states = {h: sim_state(run_dir, h) for h in ("gpu-01", "gpu-02")}
    api_before = {h: api_changes(run_dir, h) for h in ("gpu-01", "gpu-02")}
    result_before = (run_dir / "result.json").read_bytes()

    assert main(["observe", str(run_dir), "--once"]) == 0
    out = capsys.readouterr().out
    assert "observation 1 (2 node(s)" in out and ": keep" in out

    obs = _observations(run_dir)
    assert len(obs) == 1 and obs[0]["decision"] == "keep" and obs[0]["index"] == 1
    o = obs[0]["obs"]
    assert o["recurrence"] == [] and o["cuda_failures"] == [] and o["serving_failures"] == []
    # the same prefix-cache proof as the run's, against the serving replica: hits, at the run's rate
    assert o["prefix_hit_rate"] is not None and o["prefix_hit_rate"] >= o["run_prefix_hit_rate"] > 0
    for node in ("gpu-01", "gpu-02"):
        res = obs[0]["nodes"][node]
        assert res["driver_version"] == res["module_version"] == "580.95.05" and res["cuda_init_ok"]
        (srv,) = res["serving"]
        assert srv["name"] == "vllm-serving" and srv["port"] == 8001 and srv["ok"]
        assert srv["tools"]["passed"] and not srv["tools"]["empty_tool_call"]
        assert srv["prefix_cache"]["ok"]
        # every command of the pass is a query or a throwaway --rm container
        ran = _ran(run_dir, node)[before[node]:]
        assert ran and all(c.startswith(READ_ONLY) for c in ran), [c for c in ran if not c.startswith(READ_ONLY)]
        assert any(c.startswith("docker run --rm --gpus all") for c in ran)
        after = sim_state(run_dir, node)
        # the serving server was talked to, not restarted; the node is as schedulable as before
        assert after["servers"]["8001"]["instance"] == states[node]["servers"]["8001"]["instance"]
        assert after["docker"]["containers"]["vllm-serving"] == states[node]["docker"]["containers"]["vllm-serving"]
        assert after["scheduler"] == states[node]["scheduler"] and after["loaded_driver"] == "580.95.05"
        # the Kubernetes API was only read: its audit log of changes to the node and its pods is as it was
        assert api_changes(run_dir, node) == api_before[node]
        # the run recorded the serving container's restart count; the pass compared with it
        assert o["restart_baseline"][f"{node}/vllm-serving"] == {"count": 0, "source": "run"}

    # the journal still verifies, result.json is the run's, resume has nothing to do
    assert (run_dir / "result.json").read_bytes() == result_before
    assert main(["report", str(run_dir)]) == 0
    n = len(journal(run_dir))
    assert main(["resume", str(run_dir)]) == 0
    assert len(journal(run_dir)) == n                      # a finished run: resume appends nothing
    md = (run_dir / "report.md").read_text()
    assert "## Observation (after the window)" in md and "**KEEP**" in md
    assert "Do prefix-cache hits still reproduce? | ok" in md
    assert json.loads((run_dir / "report.json").read_text())["observation"]["decision"] == "keep"


def test_a_fault_that_appears_after_the_run_is_caught_as_a_recurrence_and_rollback_is_recommended(
        tmp_path, monkeypatch, capsys):
    # gpu-02 fails CUDA init in the run (error 802, triaged); gpu-01 passes, and the same
    # fault starts on it an hour after the run began
    run_dir = _rollout(tmp_path, {"gpu-01": {"sim_late_faults": [{"fault": "cuda_init_fails", "after": "1h"}]},
                                  "gpu-02": {"sim_faults": ["cuda_init_fails"]}})
    r = result(run_dir)
    assert r["nodes"]["gpu-01"]["final"] == "upgraded" and r["nodes"]["gpu-02"]["final"] == "rolled_back"
    category = r["nodes"]["gpu-02"]["triage"]
    assert category == "container_runtime"

    # right after the run: the fault has not started, the driver is kept
    assert main(["observe", str(run_dir), "--once"]) == 0
    first = _observations(run_dir)[-1]
    assert first["decision"] == "keep" and list(first["nodes"]) == ["gpu-01"]     # only what the run upgraded

    # two hours later (the simulated hosts' clock moved on): CUDA init fails the same way
    monkeypatch.setenv("K3SIM_CLOCK_OFFSET", "2h")
    before = len(_ran(run_dir, "gpu-01"))
    assert main(["observe", str(run_dir), "--once"]) == 1
    out = capsys.readouterr().out
    second = _observations(run_dir)[-1]
    assert second["index"] == 2 and second["decision"] == "rollback"
    assert second["obs"]["recurrence"] == [{"node": "gpu-01", "check": "cuda_init", "category": category}]
    assert second["obs"]["passes"] == 2
    rec = second["recommendation"]
    assert rec["command"] == f"k3rollout rollback {run_dir}" and "CHG-2026-1202" in rec["owner"]
    assert "obs.recurrence | length > 0" in rec["why"]
    assert "rollback" in out and f"k3rollout rollback {run_dir}" in out
    # a recommendation, never an action: the node keeps its new driver and stays in service
    st = sim_state(run_dir, "gpu-01")
    assert st["loaded_driver"] == "580.95.05" and st["scheduler"]["state"] == "schedulable"
    ran = _ran(run_dir, "gpu-01")[before:]
    assert ran and all(c.startswith(READ_ONLY) for c in ran), [c for c in ran if not c.startswith(READ_ONLY)]

    md = (run_dir / "report.md").read_text()
    section = md[md.index("## Observation"):md.index("## Sign-off checklist")]
    assert "**ROLLBACK**" in section and f"`k3rollout rollback {run_dir}`" in section
    assert f"gpu-01 cuda_init: {category}" in section
    assert "| 1 |" in section and "| keep |" in section and "| rollback |" in section
    # checklist item 9 (the conditions written down) says what they decided
    assert "observe rules (keep_when, rollback_when) decided rollback at observation pass 2" in md
    html = (run_dir / "report.html").read_text()
    assert 'id="observation"' in html and "ROLLBACK" in html

    # the command the recommendation names works on the observed run: the owner runs it
    assert main(["rollback", str(run_dir)]) == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "rolled_back"
    assert sim_state(run_dir, "gpu-01")["loaded_driver"] == "575.57.08"


def test_observe_runs_while_another_rollout_holds_the_lock_but_not_during_its_own_run(tmp_path):
    from k3rollout.model.inventory import load_inventory
    from k3rollout.runlog.lock import RunLock

    run_dir = _rollout(tmp_path, {"gpu-01": {}})
    inv = load_inventory([str(tmp_path / "inv" / "hosts.yml")])
    other = RunLock(inv, tmp_path / "other-run", "2026-12-03T00:00:00+00:00")
    other.acquire()                          # another rollout holds the cluster lock
    try:
        assert main(["observe", str(run_dir), "--once"]) == 0
        assert len(_observations(run_dir)) == 1
    finally:
        other.release()
    own = RunLock(inv, run_dir, "2026-12-03T00:00:00+00:00")
    own.acquire()                            # this run is being resumed right now
    try:
        n = len(journal(run_dir))
        assert main(["observe", str(run_dir), "--once"]) == 1
        assert len(journal(run_dir)) == n    # nothing appended under a live run
    finally:
        own.release()


def test_observe_stops_cleanly_on_sigterm_and_the_journal_stays_whole(tmp_path):
    run_dir = _rollout(tmp_path, {"gpu-01": {}})
    # PYTHONFAULTHANDLER: a process that hangs after the signal is sent SIGABRT below, and prints
    # where each of its threads is
    env = {**os.environ, "K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks"), "PYTHONFAULTHANDLER": "1"}
    p = subprocess.Popen([sys.executable, "-m", "k3rollout", "observe", str(run_dir), "--every", "1s", "--for", "1h"],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 600              # a hang guard: it waits for the two observations
    while time.time() < deadline and len(_observations(run_dir)) < 2:
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    try:
        out, err = p.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGABRT)
        out, err = p.communicate(timeout=60)
        pytest.fail("observe did not stop within 600 s of SIGTERM; its threads:\n" + err.decode()[-12000:])
    assert p.returncode == 0, err.decode()[-800:]
    assert b"observation stopped" in err
    obs = _observations(run_dir)
    assert len(obs) >= 2 and [o["index"] for o in obs] == list(range(1, len(obs) + 1))
    # the chain verifies (report re-reads the journal), and the run is still the run
    assert main(["report", str(run_dir)]) == 0
    assert result(run_dir)["status"] == "completed"
    assert main(["observe", str(run_dir), "--once"]) == 0    # so the next observe may start


def test_observe_stopped_outside_its_passes_says_so_and_exits_0(tmp_path, capsys, monkeypatch):
    # a stop that lands before the first pass (while the observer is set up) is taken by the CLI's
    # own KeyboardInterrupt branch: it says the observation stopped, not "continue with resume"
    from k3rollout.engine import observe

    run_dir = _rollout(tmp_path, {"gpu-01": {}})
    before = len(journal(run_dir))
    capsys.readouterr()

    def stopped(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(observe, "Observer", stopped)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert main(["observe", str(run_dir), "--once"]) == 0
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    err = capsys.readouterr().err
    assert "observation stopped" in err and "resume" not in err, err
    assert len(journal(run_dir)) == before


def test_playbook_rules_decide_and_a_bad_rule_is_refused_with_its_line(tmp_path, capsys):
    run_dir = _rollout(tmp_path, {"gpu-01": {}},
                       observe={"keep_when": ["obs.passes >= 3"], "rollback_when": ["obs.restarts | length > 0"]})
    assert main(["observe", str(run_dir), "--once"]) == 0
    o = _observations(run_dir)[-1]
    assert o["decision"] == "stay_isolated" and o["recommendation"]["why"] == ["obs.passes >= 3"]
    assert "owner GPU infra on-call" in o["recommendation"]["text"]

    pb = write_playbook(tmp_path / "bad.yml", observe={"keep_when": ["obs.passes >="]})
    inv = tmp_path / "inv" / "hosts.yml"
    assert main(["validate", str(pb), "-i", str(inv)]) == 2
    err = capsys.readouterr().err
    assert re.search(r"bad\.yml:\d+: observe\.keep_when\.0: invalid expression", err), err


def test_decide_treats_a_failing_rule_as_not_keeping():
    from k3rollout.engine.observe import decide
    from k3rollout.model.playbook import Observe

    obs = {"recurrence": [], "cuda_failures": [], "passes": 1}
    rules, decision = decide(Observe(keep_when=["obs.passes >= 1"], rollback_when=["obs.nope | length > 0"]), obs, {})
    # a rollback rule that cannot be evaluated counts as holding: a broken rule never keeps
    assert decision == "rollback" and rules["rollback_when"][0]["error"]
    rules, decision = decide(Observe(keep_when=["obs.nope"], rollback_when=["false"]), obs, {})
    assert decision == "stay_isolated"


def test_observe_refuses_a_run_that_upgraded_nothing(tmp_path, capsys):
    run_dir = _rollout(tmp_path, {"gpu-01": {"sim_faults": ["driver_install_fails"]}})
    assert main(["observe", str(run_dir), "--once"]) == 2
    assert "nothing to observe" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [[{"fault": "cuda_init_fails"}], [{"fault": "x", "after": "1h", "at": 5}],
                                 [{"fault": "cuda_init_fails", "pass": 2, "after": "1h"}],
                                 [{"fault": "cuda_init_fails", "pass": 0}], [{"fault": "cuda_init_fails", "pass": "2"}],
                                 [{"fault": "no_such_fault", "pass": 1}]])
def test_sim_late_faults_must_say_when(tmp_path, bad):
    from k3sim.state import late_faults

    with pytest.raises(ValueError, match="sim_late_faults"):
        late_faults({"sim_late_faults": bad}, 0.0)


def test_nccl_gate_runs_only_where_no_pod_holds_the_gpus_and_a_busy_node_is_left_alone(tmp_path):
    from k3sim import state as st

    # gpu-01 was cordoned before the run and stays cordoned (no pod runs there); gpu-02 serves,
    # its serving pod holding the node's GPUs (nvidia.com/gpu)
    run_dir = _rollout(tmp_path, {"gpu-01": {"sim_cordoned": True}, "gpu-02": {}}, observe={"nccl": True})
    before = {h: len(_ran(run_dir, h)) for h in ("gpu-01", "gpu-02")}
    api_before = {h: api_changes(run_dir, h) for h in ("gpu-01", "gpu-02")}
    assert main(["observe", str(run_dir), "--once"]) == 0
    o = _observations(run_dir)[-1]
    idle, busy = o["nodes"]["gpu-01"], o["nodes"]["gpu-02"]
    assert idle["scheduler_idle"]["idle"] and idle["nccl"]["ok"] and idle["nccl"]["largest_busbw"] >= 300
    assert busy["scheduler_state"] == "schedulable" and not busy["scheduler_idle"]["idle"]
    assert re.search(r"not idle: 1 pod\(s\) requesting nvidia.com/gpu run there \(inference/k2-serving-",
                     busy["nccl"]["skipped"]), busy["nccl"]
    assert any(c.startswith("all_reduce_perf") for c in _ran(run_dir, "gpu-01")[before["gpu-01"]:])
    assert not any("all_reduce_perf" in c for c in _ran(run_dir, "gpu-02")[before["gpu-02"]:])

    # an operator cordons gpu-02 (cordoned, not drained: its serving pod keeps running there):
    # out of service, but not idle, so the gate still leaves it alone
    with st.transaction(run_dir / "sim-hosts" / "gpu-02") as state:
        state["scheduler"]["state"] = "cordoned"
    mid = len(_ran(run_dir, "gpu-02"))
    assert main(["observe", str(run_dir), "--once"]) == 0
    busy = _observations(run_dir)[-1]["nodes"]["gpu-02"]
    assert busy["scheduler_state"] == "cordoned" and "inference/k2-serving-" in busy["nccl"]["skipped"]
    assert not any("all_reduce_perf" in c for c in _ran(run_dir, "gpu-02")[mid:])
    # the idleness was read from the API server, which was asked to change nothing
    for h in ("gpu-01", "gpu-02"):
        assert api_changes(run_dir, h) == api_before[h]
        ran = _ran(run_dir, h)[before[h]:]
        assert all(c.startswith(READ_ONLY) for c in ran), [c for c in ran if not c.startswith(READ_ONLY)]


def test_under_slurm_the_nccl_gate_runs_on_an_idle_node_and_skips_one_running_jobs(tmp_path):
    import yaml

    from k3sim import state as st

    # scontrol runs on the cluster's slurmctld host, slurm-ctl, never on a GPU node
    # the docker path, NCCL over the node's own transport (the slurm workload's srun is
    # tests/e2e/test_workload_slurm_sim.py)
    inv = {"all": {"vars": {"ansible_connection": "k3sim", "scheduler": "slurm", "k3_container_launcher": "docker"},
                   "children": {"gpu_nodes": {"vars": {"k3_scheduler_host": "slurm-ctl",
                                                       "sim_serving_args": SERVING, **DEFAULT_GPU},
                                              "hosts": {"gpu-01": None, "gpu-02": None}},
                                "slurm_controller": {"hosts": {"slurm-ctl": None}}}}}
    (tmp_path / "inv").mkdir()
    (tmp_path / "inv" / "hosts.yml").write_text(yaml.safe_dump(inv, sort_keys=False))
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0, max_fail_percentage=100, observe={"nccl": True})
    run_dir = tmp_path / "run"
    main(["run", str(pb), "-i", str(tmp_path / "inv" / "hosts.yml"), "--yes", "--run-dir", str(run_dir)])
    assert {n: r["final"] for n, r in result(run_dir)["nodes"].items()} == {"gpu-01": "upgraded", "gpu-02": "upgraded"}
    # back in service after the run: gpu-01 runs nothing (IDLE); a job now holds half of gpu-02 (MIXED)
    with st.transaction(run_dir / "sim-hosts" / "gpu-02") as state:
        state["scheduler"]["jobs"].append({"id": 4242, "cpus": 112, "end": time.time() + 3600})
    before = {h: len(_ran(run_dir, h)) for h in ("gpu-01", "gpu-02", "slurm-ctl")}
    assert main(["observe", str(run_dir), "--once"]) == 0
    o = _observations(run_dir)[-1]
    idle, busy = o["nodes"]["gpu-01"], o["nodes"]["gpu-02"]
    # schedulable and IDLE: nothing runs there, so the gate runs (cordoned is not the test)
    assert idle["scheduler_state"] == "schedulable" and idle["scheduler_idle"] == {"idle": True,
                                                                                  "reason": "Slurm shows it IDLE"}
    assert idle["nccl"]["ok"]
    assert busy["nccl"] == {"skipped": "not idle: Slurm shows it MIXED (jobs run, complete or are planned there); "
                                       "the NCCL gate never runs beside work"}
    assert any(c.startswith("all_reduce_perf") for c in _ran(run_dir, "gpu-01")[before["gpu-01"]:])
    assert not any("all_reduce_perf" in c for c in _ran(run_dir, "gpu-02")[before["gpu-02"]:])
    # the job runs on, untouched; the controller host only answered queries
    assert [j["id"] for j in sim_state(run_dir, "gpu-02")["scheduler"]["jobs"]] == [4242]
    ctl = _ran(run_dir, "slurm-ctl")[before["slurm-ctl"]:]
    assert ctl and all(c.startswith("scontrol show node ") for c in ctl), ctl


def test_the_run_records_serving_restart_counts_and_a_restart_before_the_first_pass_is_caught(tmp_path):
    # the serving process on gpu-01 is killed once just before the first observation pass
    # looks (an Xid error, the OOM killer); Docker's restart policy (unless-stopped) restarts it
    run_dir = _rollout(tmp_path, {"gpu-01": {"sim_late_faults": [{"fault": "serving_crash", "pass": 1}]},
                                  "gpu-02": {}})
    # the uncordon stage recorded each restarted container's RestartCount: 0 after a start by hand
    facts = [r["facts"] for r in journal(run_dir) if r["type"] == "facts" and "serving_restart_counts" in r["facts"]]
    assert {tuple(f["serving_restart_counts"].items()) for f in facts} == {(("vllm-serving", 0),)} and len(facts) == 2
    instance = sim_state(run_dir, "gpu-01")["servers"]["8001"]["instance"]

    assert main(["observe", str(run_dir), "--once"]) == 0
    o = _observations(run_dir)[-1]
    # caught at the first pass, against the run's own count (a first-pass yardstick would miss it)
    (srv,) = o["nodes"]["gpu-01"]["serving"]
    assert srv["restart_count"] == 1 and srv["state"] == "running" and srv["ok"]
    assert o["obs"]["restarts"] == ["gpu-01/vllm-serving"]
    assert o["obs"]["restart_baseline"] == {"gpu-01/vllm-serving": {"count": 0, "source": "run"},
                                            "gpu-02/vllm-serving": {"count": 0, "source": "run"}}
    assert o["decision"] == "stay_isolated" and "obs.restarts | length == 0" in o["recommendation"]["why"]
    assert not o["evidence"]["maintainability"]["ok"]
    assert "gpu-01/vllm-serving restarted or not running" in o["evidence"]["maintainability"]["detail"]
    # Docker restarted it, not the pass
    assert sim_state(run_dir, "gpu-01")["servers"]["8001"]["instance"] != instance
    md = (run_dir / "report.md").read_text()
    assert "gpu-01/vllm-serving restarted or not running" in md[md.index("## Observation"):]
    assert_reports_match_journal(run_dir)


def test_a_late_fault_given_as_a_pass_is_caught_at_that_pass_and_not_before(tmp_path):
    # gpu-02 fails CUDA init in the run (triaged); the same fault starts on gpu-01 with the
    # third observation pass, whenever that is
    run_dir = _rollout(tmp_path, {"gpu-01": {"sim_late_faults": [{"fault": "cuda_init_fails", "pass": 3}]},
                                  "gpu-02": {"sim_faults": ["cuda_init_fails"]}})
    category = result(run_dir)["nodes"]["gpu-02"]["triage"]
    for expected in (0, 0, 1):
        assert main(["observe", str(run_dir), "--once"]) == expected
    first, second, third = _observations(run_dir)
    assert [o["index"] for o in (first, second, third)] == [1, 2, 3]
    assert first["decision"] == second["decision"] == "keep"
    assert first["obs"]["recurrence"] == second["obs"]["recurrence"] == []
    assert third["decision"] == "rollback"
    assert third["obs"]["recurrence"] == [{"node": "gpu-01", "check": "cuda_init", "category": category}]
    assert sim_state(run_dir, "gpu-01")["loaded_driver"] == "580.95.05"     # recommended, not done
    # the Observation section is the journal's: the pass that decided, and the timeline of all three
    assert_reports_match_journal(run_dir)
    report = json.loads((run_dir / "report.json").read_text())["observation"]
    assert report["decision"] == "rollback" and report["decided_at"] == 3
    assert [x["decision"] for x in report["passes"]] == ["keep", "keep", "rollback"]


def _serving(**kw) -> dict:
    return {"name": "vllm-serving", "state": "running", "ok": True, "restart_count": 0,
            "prefix_cache": {"enabled": True, "ok": True, "hit_rate": 0.9}, "tools": {"passed": True}, **kw}


def test_each_pass_is_compared_with_the_runs_evidence():
    from k3rollout.engine.observe import observe_context
    from k3rollout.runlog.view import RunView

    ref = {"categories": ["container_runtime"], "nodes": {"n1": {"prefix_hit_rate": 0.9}}}
    view = RunView(finished="2026-12-03T00:00:00+00:00")
    good = {"n1": {"reachable": True, "failures": [], "serving": [_serving()]}}
    obs, ev = observe_context(good, ref, 1, view, 3600.0 + 1_796_256_000)
    assert all(e["ok"] for e in ev.values()) and obs["prefix_hit_rate"] == obs["run_prefix_hit_rate"] == 0.9
    # a run made before restart counts were recorded: nothing to compare the first pass with, and the report says so
    assert obs["restarts"] == [] and obs["restart_baseline"] == {}
    assert "restart counts of n1/vllm-serving compared with the first observation pass (the run recorded none)" in \
        ev["maintainability"]["detail"]

    # the run's recorded count is the yardstick, from the first pass on
    recorded = {**ref, "nodes": {"n1": {"prefix_hit_rate": 0.9, "restart_counts": {"vllm-serving": 0}}}}
    once = {"n1": {"reachable": True, "failures": [], "serving": [_serving(restart_count=1)]}}
    obs, ev = observe_context(once, recorded, 1, view, 0.0)
    assert obs["restarts"] == ["n1/vllm-serving"] and obs["restart_baseline"]["n1/vllm-serving"]["source"] == "run"
    assert "first observation pass" not in ev["maintainability"]["detail"]

    # without it, the first pass's restart count is the yardstick for later ones
    view.observations.append({"index": 1, "nodes": good})
    bad = {"n1": {"reachable": True, "failures": [{"check": "cuda_init", "category": "container_runtime"}],
                  "driver_drift": ["driver_version 580.105.08 (the run left 580.95.05)"],
                  "serving": [_serving(restart_count=2, digest_drift="retagged",
                                       prefix_cache={"enabled": True, "ok": False, "hit_rate": 0.0},
                                       tools={"passed": False, "empty_tool_call": True})]}}
    obs, ev = observe_context(bad, ref, 2, view, 0.0)
    assert obs["passes"] == 2
    assert obs["recurrence"] == [{"node": "n1", "check": "cuda_init", "category": "container_runtime"}]
    assert obs["cuda_failures"] == ["n1"] and obs["restarts"] == ["n1/vllm-serving"]
    assert obs["restart_baseline"] == {"n1/vllm-serving": {"count": 0, "source": "first observation pass"}}
    assert obs["prefix_hits_stopped"] and obs["prefix_hit_rate"] == 0.0
    assert obs["tool_call_failures"] == obs["empty_tool_calls"] == ["n1/vllm-serving"]
    assert obs["driver_drift"] and obs["image_drift"] == ["n1/vllm-serving: retagged"]
    assert not any(e["ok"] for e in ev.values())

    # a lower hit rate than the run's (hits still there) fails the prefix-cache piece too
    lower = {"n1": {"reachable": True, "failures": [], "serving": [_serving(
        prefix_cache={"enabled": True, "ok": True, "hit_rate": 0.5})]}}
    obs, ev = observe_context(lower, ref, 3, view, 0.0)
    assert not obs["prefix_hits_stopped"] and not ev["prefix_cache"]["ok"] and "50.0%" in ev["prefix_cache"]["detail"]


def test_a_bad_late_fault_is_refused_naming_its_host(tmp_path, capsys):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_late_faults": [{"fault": "cuda_init_fails"}]}})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0)
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(tmp_path / "run")]) == 2
    assert "host gpu-01: sim_late_faults" in capsys.readouterr().err


@pytest.mark.parametrize("flag,enabled", [(None, True), ("--no-enable-prefix-caching", False)])
def test_observe_proves_the_cache_on_a_server_that_caches_by_default(tmp_path, flag, enabled):
    # vLLM 0.33 caches prefixes unless told not to: a server launched without
    # --enable-prefix-caching still caches, and observe proves it
    serving = [a for a in SERVING if a != "--enable-prefix-caching"] + ([flag] if flag else [])
    run_dir = _rollout(tmp_path, {"gpu-01": {"sim_serving_args": serving}})
    assert main(["observe", str(run_dir), "--once"]) in (0, 1)
    (srv,) = _observations(run_dir)[0]["nodes"]["gpu-01"]["serving"]
    assert srv["prefix_cache"]["enabled"] is enabled
    if enabled:
        assert srv["prefix_cache"]["ok"] and srv["prefix_cache"]["hit_rate"] > 0
    else:
        assert srv["prefix_cache"]["reason"] == "launched with --no-enable-prefix-caching"
