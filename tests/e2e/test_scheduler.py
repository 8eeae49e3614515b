"""The Scheduler seam: one implementation per kind, the simulated Slurm cluster's DRAINING
state, and scheduler operations on a host the inventory names (k3_scheduler_host), never on
the node being changed. Real-controller Slurm tests: tests/e2e/test_scheduler_slurm.py."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml
from support import PLAYBOOK, ROOT, commands, journal, result, with_default_gpu, write_playbook

from k3rollout.checks import parsers
from k3rollout.cli import main
from k3rollout.scheduler import SCHEDULERS, scheduler_for
from k3sim.dispatch import dispatch, init_cluster
from k3sim.state import transaction


def sh(d: Path, *argv: str):
    return dispatch(d, list(argv))


def slurm_inventory(tmp_path: Path, gpu_hosts: dict[str, dict], extra: dict | None = None,
                    controller: bool = True) -> Path:
    """GPU nodes under Slurm, and (``controller``) the cluster's slurmctld host ``slurm-ctl``
    in a group of its own, named by every GPU node's k3_scheduler_host."""
    inv = {"all": {"vars": {"ansible_connection": "k3sim", "scheduler": "slurm", **(extra or {})},
                   "children": {"gpu_nodes": {"hosts": {h: with_default_gpu(v, extra) for h, v in gpu_hosts.items()}}}}}
    if controller:
        inv["all"]["children"]["slurm_controller"] = {"hosts": {"slurm-ctl": None}}
        inv["all"]["children"]["gpu_nodes"]["vars"] = {"k3_scheduler_host": "slurm-ctl"}
    path = tmp_path / "inv" / "hosts.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(inv, sort_keys=False))
    return path


def test_one_implementation_per_kind_and_no_kind_chains_in_the_stages():
    assert set(SCHEDULERS) == {"kubernetes", "slurm", "none"}
    assert scheduler_for({}).kind == "kubernetes" and scheduler_for({"scheduler": "slurm"}).kind == "slurm"
    for f in (ROOT / "k3rollout" / "stages").glob("*.py"):
        text = f.read_text()
        assert not re.search(r"""['"](kubernetes|slurm)['"]""", text), f"{f.name} names a scheduler kind"
        assert "kubectl" not in text and "scontrol" not in text, f"{f.name} runs a scheduler command itself"


def test_sim_slurm_node_is_draining_while_its_job_runs_then_drained(tmp_path):
    # both jobs outlast the test; n1's ends when the test ends it below (a job of a fraction of
    # a second ended on its own before the first look on a loaded machine)
    hosts = init_cluster(tmp_path / "hosts", {
        "n1": {"scheduler": "slurm", "sim_slurm_job_s": 3600},
        "n2": {"scheduler": "slurm", "sim_slurm_job_s": 3600, "sim_slurm_job_cpus": 112}})
    n1, n2 = hosts["n1"], hosts["n2"]
    assert "State=ALLOCATED " in sh(n1, "scontrol", "show", "node", "n1").stdout
    assert "State=MIXED " in sh(n2, "scontrol", "show", "node", "n2").stdout
    assert sh(n1, "scontrol", "update", "NodeName=n1", "State=DRAIN").rc == 1            # Slurm wants a Reason
    for d, n in ((n1, "n1"), (n2, "n2")):
        assert sh(d, "scontrol", "update", f"NodeName={n}", "State=DRAIN", "Reason=k3rollout r1").rc == 0
    out1 = sh(n1, "scontrol", "show", "node", "n1").stdout
    out2 = sh(n2, "scontrol", "show", "node", "n2").stdout
    assert "State=ALLOCATED+DRAIN " in out1 and "State=MIXED+DRAIN " in out2
    assert parsers.scontrol_node_state(out1) == parsers.scontrol_node_state(out2) == "draining"
    with transaction(n1) as s:                  # n1's job finishes
        s["scheduler"]["jobs"][0]["end"] = time.time() - 1
    out1 = sh(n1, "scontrol", "show", "node", "n1").stdout
    assert "State=IDLE+DRAIN " in out1 and "CPUAlloc=0 " in out1 and "Reason=k3rollout r1 [" in out1
    assert parsers.scontrol_node_state(out1) == "cordoned"
    assert sh(n1, "scontrol", "update", "NodeName=n1", "State=RESUME").rc == 0
    assert parsers.scontrol_node_state(sh(n1, "scontrol", "show", "node", "n1").stdout) == "schedulable"
    # a controller host answers for the other nodes of the cluster; an unknown node is an error
    assert "State=MIXED+DRAIN " in sh(n1, "scontrol", "show", "node", "n2").stdout
    assert sh(n1, "scontrol", "show", "node", "n9").rc == 1


def test_slurm_operations_run_on_the_named_scheduler_host_and_wait_for_drained(tmp_path):
    inv = slurm_inventory(tmp_path, {"gpu-01": {"sim_slurm_job_after_drain_s": 1.0}, "gpu-02": {}})
    run_dir = tmp_path / "run"
    assert main(["run", str(write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0)), "-i", str(inv),
                 "--yes", "--run-dir", str(run_dir)]) == 0
    r = result(run_dir)
    assert {r["nodes"][n]["final"] for n in ("gpu-01", "gpu-02")} == {"upgraded"}
    assert "slurm-ctl" not in r["nodes"]
    for node in ("gpu-01", "gpu-02"):
        assert not [c for c in commands(run_dir, node) if c.startswith("scontrol")]
        sched = [x for x in journal(run_dir) if x["type"] == "step_started" and x["node"] == node
                 and x["argv"][0] == "scontrol"]
        assert sched and {x.get("ran_on") for x in sched} == {"slurm-ctl"}
    ctl = commands(run_dir, "slurm-ctl")
    assert "scontrol update NodeName=gpu-01 State=DRAIN 'Reason=k3rollout " + journal(run_dir)[0]["run_id"] + "'" in ctl
    assert "scontrol update NodeName=gpu-02 State=RESUME" in ctl
    # gpu-01's job kept it DRAINING for a while; nothing was installed before it was DRAINED
    states = [parsers.scontrol_node_state(p.read_text().split("--- stdout ---", 1)[1])
              for p in (run_dir / "evidence" / "gpu-01").glob("*cordon/scheduler-state*.txt")]
    assert "draining" in states and "cordoned" in states
    evidence = (run_dir / "evidence" / "gpu-01").glob("*cordon/drain.txt")
    assert "# host=slurm-ctl " in next(evidence).read_text()


def test_check_access_asks_the_simulated_slurm_controller_where_scontrol_runs(tmp_path, capsys):
    """The simulated slurmctld runs as the simulating user (its SlurmUser), and a simulated
    host's session is that user, root under sudo: the reservation right holds on either place."""
    import os
    import pwd

    me = pwd.getpwuid(os.geteuid()).pw_name
    d = init_cluster(tmp_path / "hosts", {"h": {"scheduler": "slurm"}})["h"]
    assert sh(d, "id", "-un").stdout == f"{me}\n"
    assert sh(d, "sudo", "-n", "--", "id", "-un").stdout == "root\n"
    assert sh(d, "sudo", "-n", "-u", "slurm", "--", "id", "-un").stdout == "slurm\n"
    assert f"SlurmUser               = {me}({os.geteuid()})\n" in sh(d, "scontrol", "show", "config").stdout
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0)
    for controller, where in ((True, "slurm-ctl"), (False, "the controller")):
        inv = slurm_inventory(tmp_path / where.replace(" ", "-"), {"gpu-01": {}}, controller=controller)
        assert main(["plan", str(pb), "-i", str(inv), "--check-access"]) == 0
        out = capsys.readouterr().out
        assert "Slurm reservations (1 nodes): ok" in out
        assert f"scontrol on {where} runs as {me} (" in out and "k3rollout-lock.k3sim (the cluster lock)" in out


def test_without_a_scheduler_host_the_simulated_controller_answers_scontrol(tmp_path):
    """scontrol runs on the controller by default; on a simulated cluster that is the sim's
    controller (it answers for every node, as slurmctld does), never the node itself and
    never a real scontrol that happens to be installed on this machine."""
    inv = slurm_inventory(tmp_path, {"gpu-01": {"sim_slurm_job_after_drain_s": 1.0}, "gpu-02": {}},
                          controller=False)
    run_dir = tmp_path / "run"
    assert main(["run", str(write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0)), "-i", str(inv),
                 "--yes", "--run-dir", str(run_dir)]) == 0
    r = result(run_dir)
    assert {v["final"] for v in r["nodes"].values()} == {"upgraded"}
    for node in ("gpu-01", "gpu-02"):
        assert not [c for c in commands(run_dir, node) if c.startswith("scontrol")]
        sched = [x for x in journal(run_dir) if x["type"] == "step_started" and x["node"] == node
                 and x["argv"][0] == "scontrol"]
        assert sched and {x.get("ran_on") for x in sched} == {"controller"}
    states = [parsers.scontrol_node_state(p.read_text().split("--- stdout ---", 1)[1])
              for p in (run_dir / "evidence" / "gpu-01").glob("*cordon/scheduler-state*.txt")]
    assert "draining" in states and "cordoned" in states


def test_sim_node_still_running_a_job_at_drain_timeout_fails_cordon_and_is_resumed(tmp_path):
    inv = slurm_inventory(tmp_path, {"gpu-01": {"sim_slurm_job_s": 600}})
    run_dir = tmp_path / "run"
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0, max_fail_percentage=100,
                        stage_with={"cordon": {"drain_timeout": "1s"}})
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    node = result(run_dir)["nodes"]["gpu-01"]
    assert node["failed_stage"] == "cordon" and node["final"] == "rolled_back"
    assert not [c for c in commands(run_dir, "gpu-01") if c.startswith(("apt-get install", "reboot"))]
    assert "scontrol update NodeName=gpu-01 State=RESUME" in commands(run_dir, "slurm-ctl")
    show = dispatch(run_dir / "sim-hosts" / "slurm-ctl", ["scontrol", "show", "node", "gpu-01"]).stdout
    assert "State=ALLOCATED " in show                  # its job runs on, and it takes work again


@pytest.mark.parametrize("value, fragment", [
    ("gpu-01", "names the host itself"),
    ("slurm-ctl-9", "is not a host of this inventory"),
])
def test_a_bad_scheduler_host_is_an_input_error_naming_the_file(tmp_path, capsys, value, fragment):
    inv = slurm_inventory(tmp_path, {"gpu-01": {"k3_scheduler_host": value}}, controller=False)
    assert main(["validate", str(PLAYBOOK), "-i", str(inv)]) == 2
    err = capsys.readouterr().err
    assert str(inv) in err and "k3_scheduler_host" in err and fragment in err and "Traceback" not in err


def test_a_drain_interrupted_by_a_crash_is_settled_on_resume_not_sent_twice(tmp_path):
    from support import cli

    # the docker path: the slurm workload drains the node again before deleting its reservation
    # (a second DRAIN of its own, tests/e2e/test_workload_slurm_sim.py); this counts the cordon's
    inv = slurm_inventory(tmp_path, {"gpu-01": {"sim_slurm_job_s": 1.0}}, {"k3_container_launcher": "docker"})
    pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0)
    ref = tmp_path / "ref"
    assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(ref)]) == 0
    # the record that would say the DRAIN finished is torn: the command ran, its outcome is lost
    seq = next(r["seq"] for r in journal(ref) if r["type"] == "step_done" and r["key"].endswith("cordon/drain"))
    run_dir = tmp_path / "run"
    killed = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir),
                 fault=("TEAR", seq))
    assert killed.returncode == -9, killed.stderr[-500:]
    assert cli("resume", str(run_dir)).returncode == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    drains = [c for c in commands(run_dir, "slurm-ctl") if c.startswith("scontrol update NodeName=gpu-01 State=DRAIN")]
    assert len(drains) == 1
    settled = [r for r in journal(run_dir) if r["type"] == "step_settled" and r["key"].endswith("cordon/drain")]
    assert settled and settled[0]["took_effect"] is True
