"""The sliding-window batch policy: after the canaries, a node starts as soon as another finishes."""

import json
from datetime import datetime

import pytest
from support import journal, result, write_inventory, write_playbook

from k3rollout.cli import main
from k3rollout.errors import InputError
from k3rollout.model import load_inventory, load_playbook
from k3rollout.plan import make_plan


def _ts(t):
    return datetime.fromisoformat(t).timestamp()


def _spans(run_dir):
    """node -> (cordon start, uncordon or rollback end)."""
    out = {}
    for r in journal(run_dir):
        if r["type"] == "stage_started" and r["stage"] == "cordon":
            out[r["node"]] = [_ts(r["ts"]), None]
        elif (r["type"] == "stage_done" and r["stage"] == "uncordon") or r["type"] == "rollback_done":
            if r["node"] in out:
                out[r["node"]][1] = _ts(r["ts"])
    return out


def _first(run_dir, type_, stage):
    """node -> the time of its first ``type_`` record of ``stage``."""
    out = {}
    for r in journal(run_dir):
        if r["type"] == type_ and r.get("stage") == stage:
            out.setdefault(r["node"], _ts(r["ts"]))
    return out


def _out_at(spans, t, but=None):
    """The nodes out of service (cordon start to uncordon or rollback end) at time ``t``."""
    return {n for n, (a, b) in spans.items() if n != but and a <= t and (b is None or t < b)}


def _run(tmp_path, hosts, **over):
    inv = write_inventory(tmp_path / "inv", hosts)
    pb = write_playbook(tmp_path / "pb.yml", **over)
    run_dir = tmp_path / "run"
    return main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]), run_dir, pb, inv


def test_window_keeps_k_in_flight_and_does_not_wait_for_a_straggler(tmp_path, capsys):
    hosts = {f"gpu-{i:02d}": {} for i in range(1, 8)}
    hosts["gpu-02"] = {"sim_reboot_s": 6.0}          # a slow reboot right after the canary
    code, run_dir, pb, inv = _run(tmp_path, hosts, serial=[1, 1], min_serving=4,
                                  window={"max_unavailable": 2, "fail_window": 4})
    assert code == 0, capsys.readouterr().out
    res = result(run_dir)
    assert all(n["final"] == "upgraded" for n in res["nodes"].values())
    assert [len(b["nodes"]) for b in res["batches"]] == [1, 6]
    spans = _spans(run_dir)
    events = sorted([(a, 1) for a, _ in spans.values()] + [(b, -1) for _, b in spans.values()], key=lambda e: (e[0], e[1]))
    live = most = 0
    for _, d in events:
        live += d
        most = max(most, live)
    assert most == 2                                   # never more than max_unavailable out at once
    # a node waiting for a slot is not counted before its cordon: its baseline (in service) ran
    # while max_unavailable others were out, and it went out only once one came back
    ahead = [n for n, t in _first(run_dir, "stage_started", "baseline").items()
             if n in spans and len(_out_at(spans, t, but=n)) == 2]
    assert ahead
    assert all(len(_out_at(spans, spans[n][0], but=n)) < 2 for n in ahead)
    slow_out, slow_back = spans["gpu-02"]
    # while the straggler rebooted, other nodes went out and came back: no barrier
    overtook = [n for n, (a, b) in spans.items() if n not in ("gpu-01", "gpu-02") and a > slow_out and b < slow_back]
    assert overtook
    assert any(r["type"] == "batch_done" and r["batch"] == 2 and r["status"] == "passed" for r in journal(run_dir))
    # the report's makespan beside both bounds: the plain one (every slot busy from the start) and
    # the one with the canary batch as a barrier (the expansion waits for its verdict)
    t = json.loads((run_dir / "report.json").read_text())["timing"]
    assert t["makespan_s"] >= t["canary_bound_s"] > t["lower_bound_s"] > 0
    assert t["canary_makespan_ratio"] == pytest.approx(t["makespan_s"] / t["canary_bound_s"])
    capsys.readouterr()
    assert main(["plan", str(pb), "-i", str(inv)]) == 0
    text = capsys.readouterr().out
    assert "sliding window after 1 canary batch(es): batch 2 keeps up to 2 node(s) in flight" in text
    assert "makespan: serial batches" in text


def test_window_stops_starting_when_the_last_n_fail_too_often(tmp_path):
    hosts = {f"gpu-{i:02d}": {} for i in range(1, 9)}
    for h in ("gpu-05", "gpu-06"):
        hosts[h] = {"sim_faults": ["driver_install_fails"]}
    code, run_dir, _, _ = _run(tmp_path, hosts, serial=[1, 1], min_serving=2, max_fail_percentage=25,
                               window={"max_unavailable": 1, "fail_window": 4})
    assert code == 1
    halt = next(r for r in journal(run_dir) if r["type"] == "run_halted")
    assert halt["kind"] == "failure" and "2 of the last 4 node(s) started failed (50%)" in halt["reason"]
    finals = {n: v["final"] for n, v in result(run_dir)["nodes"].items()}
    # gpu-05 alone is 1 of the last 4 (25%, not above): the window went on; gpu-06 made it 2 of 4
    assert finals["gpu-05"] == "rolled_back" and finals["gpu-06"] == "rolled_back"
    assert [n for n, f in finals.items() if f == "upgraded"] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    assert [n for n, f in finals.items() if f == "pending"] == ["gpu-07", "gpu-08"]


def test_window_plan_and_bad_input(tmp_path):
    inv = load_inventory(write_inventory(tmp_path / "inv", {f"gpu-{i:02d}": {} for i in range(1, 17)}))
    plan = make_plan(load_playbook(write_playbook(tmp_path / "a.yml", window={"max_unavailable": "25%"})), inv,
                     window_s=6 * 3600)
    assert [len(b.nodes) for b in plan.batches] == [1, 2, 13]
    assert plan.policy["batch"] == 3 and plan.policy["max_unavailable"] == 4
    assert plan.batches[2].serving_during == 12
    # 83 min a node + 28 min rollback reserve, 4 in flight, 6 h window: after the canaries (166 min) a
    # node may start up to 83 min in, so two rounds of 4 start
    assert plan.batches[2].fits_window is False
    assert any("window batch 3: 8 of 13 node(s) can start" in n for n in plan.notes)
    serial = make_plan(load_playbook(write_playbook(tmp_path / "b.yml")), inv)
    assert serial.policy == {} and [len(b.nodes) for b in serial.batches] == [1, 2, 4, 4, 4, 1]
    with pytest.raises(InputError, match="stage gate waits per batch"):
        load_playbook(write_playbook(tmp_path / "c.yml", window={"max_unavailable": 2},
                                     stage_set={"driver_upgrade": {"pause": {}}}))
    with pytest.raises(InputError, match="max_unavailable"):
        load_playbook(write_playbook(tmp_path / "d.yml", window={"max_unavailable": 0}))


def test_a_run_killed_inside_the_window_resumes_without_repeating(tmp_path):
    from support import forked_cli as cli

    inv = write_inventory(tmp_path / "inv", {f"gpu-{i:02d}": {} for i in range(1, 7)})
    pb = write_playbook(tmp_path / "pb.yml", serial=[1, 1], min_serving=3, window={"max_unavailable": 2},
                        prestage={"parallel": 2})
    run_dir = tmp_path / "run"
    env = {"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    killed = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), env=env, fault=("KILL", 900))
    assert killed.returncode == -9
    assert cli("resume", str(run_dir), env=env).returncode == 0
    recs = journal(run_dir)
    resumed = next(r["seq"] for r in recs if r["type"] == "run_resumed")
    window_start = next(r["seq"] for r in recs if r["type"] == "batch_started" and r["batch"] == 2)
    assert window_start < resumed                      # the kill fell inside the window batch
    assert [r["batch"] for r in recs if r["type"] == "batch_started"] == [1, 2]
    assert sorted(r["node"] for r in recs if r["type"] == "prestage_done") == [f"gpu-{i:02d}" for i in range(1, 7)]
    for node in [f"gpu-{i:02d}" for i in range(1, 7)]:
        reboots = [r for r in recs if r["type"] == "step_started" and r["node"] == node and r["step"] == "reboot"]
        assert len(reboots) == 1
    assert all(n["final"] == "upgraded" for n in result(run_dir)["nodes"].values())


def test_window_holds_the_capacity_floor_at_each_cordon(tmp_path):
    # 8 nodes, 6 must serve, 2 out at once; gpu-03 fails and stays cordoned (quarantine): from then
    # on the floor lets only one more out, so the window runs one at a time though a second slot is
    # free, and the nodes that walked their baseline ahead wait before their cordon for the floor
    hosts = {f"gpu-{i:02d}": {} for i in range(1, 9)}
    hosts["gpu-03"] = {"sim_faults": ["driver_install_fails"]}
    code, run_dir, _, _ = _run(tmp_path, hosts, serial=[1, 1], min_serving=6, max_fail_percentage=50,
                               on_node_failure="quarantine", window={"max_unavailable": 2})
    assert code == 0
    finals = {n: v["final"] for n, v in result(run_dir)["nodes"].items()}
    assert finals.pop("gpu-03") != "upgraded"
    assert set(finals.values()) == {"upgraded"}
    spans = _spans(run_dir)
    bad_back = spans["gpu-03"][1]
    spans["gpu-03"][1] = None                          # quarantined: out of service to the end
    cordons = {n: a for n, (a, _) in spans.items()}
    late = [n for n, a in cordons.items() if a > bad_back]
    assert len(late) >= 3
    for n, a in cordons.items():
        assert len(_out_at(spans, a, but=n)) + 1 <= 2, n   # 8 - 6 out at most, the quarantined one counted
    # the baseline of a node cordoned after the quarantine ran while another node was out beside the
    # quarantined one (the floor, not a slot, held it back): it waited at its cordon
    base = _first(run_dir, "stage_started", "baseline")
    assert any(len(_out_at(spans, base[n], but=n)) == 2 for n in late)


_KILL_AT_FULL_GATE = """
import os, signal, sys
from k3rollout.engine import window

gate = window._Window.before_cordon

def killing_gate(self, node):
    # SIGKILL the run the first time a node, its baseline done, finds every slot taken
    with self.cond:
        full = node not in self.out and len(self.out) >= self.k
    if full:
        os.kill(os.getpid(), signal.SIGKILL)
    return gate(self, node)

window._Window.before_cordon = killing_gate
from k3rollout.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_run_killed_while_a_node_waits_at_its_cordon_resumes_to_the_same_end(tmp_path):
    import os
    import subprocess
    import sys

    from support import ROOT, cli

    hosts = {f"gpu-{i:02d}": {} for i in range(1, 8)}
    inv = write_inventory(tmp_path / "inv", hosts)
    pb = write_playbook(tmp_path / "pb.yml", serial=[1, 1], min_serving=5, window={"max_unavailable": 2})
    run_dir = tmp_path / "run"
    env = {**os.environ, "K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    killed = subprocess.run([sys.executable, "-c", _KILL_AT_FULL_GATE, "run", str(pb), "-i", str(inv), "--yes",
                             "--run-dir", str(run_dir)], env=env, cwd=str(ROOT), capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == -9, killed.stdout[-2000:] + killed.stderr[-2000:]
    before = journal(run_dir)
    states = {}
    for r in before:
        if r["type"] == "node_state":
            states[r["node"]] = r["to"]
    cordoned = {r["node"] for r in before if r["type"] == "stage_started" and r["stage"] == "cordon"}
    held = [n for n, st in states.items() if st == "cordon-required" and n not in cordoned]
    assert held                                        # a node was held before its cordon, its baseline done
    assert cli("resume", str(run_dir), env={"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}).returncode == 0
    recs = journal(run_dir)
    assert [r["batch"] for r in recs if r["type"] == "batch_started"] == [1, 2]
    assert all(n["final"] == "upgraded" for n in result(run_dir)["nodes"].values())

    def count(node, typ, key, val):
        return len([r for r in recs if r["type"] == typ and r["node"] == node and r.get(key) == val])

    for node in held:
        # the held node goes on from its cordon: its baseline is not taken again
        assert count(node, "stage_started", "stage", "baseline") == 1, node
        assert count(node, "stage_started", "stage", "cordon") == 1, node
    for node in hosts:
        assert count(node, "step_started", "step", "reboot") == 1, node   # no destructive step twice
    spans = _spans(run_dir)
    for n, (a, _) in spans.items():
        assert len(_out_at(spans, a, but=n)) < 2, n    # max_unavailable held across the kill too
