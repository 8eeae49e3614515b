"""Estimates from earlier runs (plan --history), time out of service, makespan and its lower bound."""

import json

import pytest
import yaml
from support import PLAYBOOK, journal, write_inventory, write_playbook

from k3rollout.cli import main
from k3rollout.model import load_inventory, load_playbook
from k3rollout.plan import make_plan
from k3rollout.plan import timing as tm

H200 = {"k3_gpu_model": "NVIDIA H200", "k3_gpu_count": 8, "k3_gpu_mem_gib": 141}
B200 = {"k3_gpu_model": "NVIDIA B200", "k3_gpu_mem_gib": 180, "sim_reboot_s": 1.5}


def _run(tmp_path, name, hosts, **over):
    inv = write_inventory(tmp_path / f"inv-{name}", hosts)
    pb = write_playbook(tmp_path / f"pb-{name}.yml", **over)
    # the runs time the node stages of two GPU classes; neither holds Kimi K3 on one node (vLLM
    # runs out of memory loading it), so the play leaves out the stages that serve it
    data = yaml.safe_load(pb.read_text())
    data[0]["stages"] = [s for s in data[0]["stages"] if s["stage"] not in ("vllm_smoke", "features")]
    pb.write_text(yaml.safe_dump(data, sort_keys=False))
    run_dir = tmp_path / name
    code = main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    return code, run_dir, pb


def test_window_makespan_and_lower_bound_by_hand():
    units = [{"unit": f"u{i}", "nodes": [f"u{i}"], "lead_s": 1.0, "out_of_service_s": 10.0, "total_s": 11.0}
             for i in range(4)]
    # canary of 1 (11 s), then 3 units over 2 slots; each walks its 1 s lead ahead of its slot and
    # holds a slot from its cordon: two out at 12, back at 22, the third out at 22, back at 32
    assert tm.window_makespan(units, [1], 2) == 32.0
    # no policy that waits for the canary's verdict beats its 11 s plus the rest's bound (1 + 30 / 2)
    assert tm.canary_bound(units, [1], 2) == 27.0
    assert tm.canary_bound(units, [], 2) == tm.lower_bound(units, 2)[0]
    # 4 x 10 s out of service over 2 slots after a 1 s lead beats the longest unit (11 s)
    assert tm.lower_bound(units, 2) == (21.0, "capacity: out-of-service work over 2 unit(s) out at once")
    assert tm.lower_bound(units, 8)[0] == 11.0
    assert tm.percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90) == 9
    assert tm.percentile([5.0], 90) == 5.0


def test_plan_without_history_says_it_uses_the_playbook(tmp_path, capsys):
    # the node-level play (the shipped one plans K3 replicas, which these GPU-less test nodes cannot size)
    plan = make_plan(load_playbook(write_playbook(tmp_path / "pb.yml")),
                     load_inventory(write_inventory(tmp_path / "inv", {f"gpu-{i:02d}": {} for i in range(1, 9)})))
    t = plan.timing
    assert {r["source"] for r in t["stages"]} == {"playbook"}
    per_node = sum(s["estimate_s"] for s in plan.stages)
    out = per_node - next(s["estimate_s"] for s in plan.stages if s["stage"] == "baseline")
    assert all(u["out_of_service_s"] == out for u in t["units"])
    assert t["serial_makespan_s"] == plan.total_estimate_s
    assert t["lower_bound_s"] <= t["window_makespan_s"] <= t["serial_makespan_s"]


@pytest.mark.e2e          # two whole rollouts on the simulated cluster
def test_history_takes_p90_per_stage_and_hardware_class(tmp_path, capsys):
    code, run_dir, pb = _run(tmp_path, "r1", {"gpu-a01": H200, "gpu-a02": H200, "gpu-b01": B200, "gpu-b02": B200},
                             serial=2, min_serving=1)
    assert code == 0, capsys.readouterr()
    # the run's report says what happened: out of service per node, makespan beside its lower bound
    rep = json.loads((run_dir / "report.json").read_text())["timing"]
    by_unit = {u["unit"]: u for u in rep["units"]}
    assert set(by_unit) == {"gpu-a01", "gpu-a02", "gpu-b01", "gpu-b02"}
    assert by_unit["gpu-b01"]["out_of_service_s"] >= 1.5          # its reboot alone
    assert all(u["out_of_service_s"] >= u["work_s"] - 1e-6 for u in rep["units"])
    assert rep["makespan_s"] >= rep["lower_bound_s"] > 0
    assert "Time out of service and makespan" in (run_dir / "report.md").read_text()
    capsys.readouterr()

    # a second run that only captured baseline: history for baseline, nothing else
    code, run_dir2, _ = _run(tmp_path, "r2", {"gpu-a01": H200}, vars={"allow_in_place_change": False})
    assert code == 0
    capsys.readouterr()

    inv = write_inventory(tmp_path / "inv-next", {"gpu-x01": H200, "gpu-x02": {"k3_gpu_model": "NVIDIA B200"},
                                                  "gpu-x03": {"k3_gpu_model": "NVIDIA GB300"}})
    assert main(["plan", str(pb), "-i", str(inv), "--json", "--history", str(run_dir), str(run_dir2)]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {(r["stage"], r["class"]): r for r in data["timing"]["stages"]}
    up_b, up_h = rows[("driver_upgrade", "NVIDIA B200")], rows[("driver_upgrade", "NVIDIA H200")]
    assert up_b["source"] == "history (NVIDIA B200)" and up_b["samples"] == 2
    assert up_h["source"] == "history (NVIDIA H200)"
    # the B200 samples hold its 1.5 s reboot (a floor, whatever the machine's speed); each
    # class is estimated from its own samples
    assert up_b["used_s"] == up_b["p90_s"] >= up_b["median_s"] >= 1.5
    assert up_h["used_s"] == up_h["p90_s"] and up_h["samples"] == 2
    # a class no run had takes the stage's samples over every class
    assert rows[("driver_upgrade", "NVIDIA GB300")]["source"] == "history (all classes)"
    assert rows[("baseline", "NVIDIA H200")]["samples"] == 3        # two from r1, one from r2
    # the batch with the B200 node waits for it; the plan's totals follow the history, not the playbook
    per = {tuple(b["nodes"]): b["estimate_s"] for b in data["batches"]}
    assert data["total_estimate_s"] < 600 and data["timing"]["serial_makespan_s"] == data["total_estimate_s"]
    assert max(per.values()) >= 1.5
    units = {u["unit"]: u for u in data["timing"]["units"]}
    # out of service: each node's class's estimates from cordon on (not a comparison of two
    # measured times, which the machine's load can turn either way)
    kinds = [r["stage"] for r in data["stages"]]
    after = kinds[kinds.index("cordon"):]
    for unit, cls in (("gpu-x01", "NVIDIA H200"), ("gpu-x02", "NVIDIA B200")):
        assert units[unit]["out_of_service_s"] == pytest.approx(sum(rows[(k, cls)]["used_s"] for k in after))
    assert data["timing"]["history_runs"] == [str(run_dir), str(run_dir2)]

    # a stage kind no run recorded keeps the playbook's estimate, and says so
    hist = tm.History()
    hist.add_run("r2", {"gpu-a01": ("NVIDIA H200", [s for s in _spans(run_dir2) if s["stage"] == "baseline"])})
    rows2 = tm.stage_table([{"stage": "baseline", "estimate_s": 180.0}, {"stage": "cordon", "estimate_s": 300.0}],
                           ["NVIDIA H200"], hist)
    assert [r["source"] for r in rows2] == ["history (NVIDIA H200)", "playbook"] and rows2[1]["used_s"] == 300.0

    assert main(["plan", str(pb), "-i", str(inv), "--history", str(run_dir)]) == 0
    text = capsys.readouterr().out
    assert "history (NVIDIA B200)" in text and "lower bound" in text and "sliding window" in text
    assert "gpu-x02         out of service" in text


def _spans(run_dir):
    spans = {}
    for r in journal(run_dir):
        if r["type"] == "stage_started":
            spans[(r["node"], r["stage"])] = {"stage": r["stage"], "start": r["ts"], "end": None, "passed": None}
        elif r["type"] == "stage_done":
            spans[(r["node"], r["stage"])].update(end=r["ts"], passed=r["passed"])
    return list(spans.values())


def test_history_that_is_not_a_run_is_bad_input(tmp_path, capsys):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}})
    (tmp_path / "empty").mkdir()
    assert main(["plan", str(PLAYBOOK), "-i", str(inv), "--history", str(tmp_path / "empty")]) == 2
    assert str(tmp_path / "empty") in capsys.readouterr().err
