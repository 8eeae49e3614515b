"""``k3_driver_backend: gpu-operator``: on a node whose driver the NVIDIA GPU Operator runs as
a container, the driver stage moves the cordoned, drained node into the target NVIDIADriver
pool by its node label and watches ``nvidia.com/gpu-driver-upgrade-state`` until upgrade-done,
through the (simulated) Kubernetes API from the controller; upgrade-failed fails the stage and
the rollback moves the node back to the pool baseline saw. No host package command and no
reboot ever runs on such a node."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from support import (
    api_changes,
    commands,
    journal,
    result,
    sim_state,
    write_inventory,
    write_playbook,
)

from e2e.test_preflight import failed, preflight, ran
from k3rollout.cli import main

STATE = "nvidia.com/gpu-driver-upgrade-state"
POOL = "driver.config"
OPERATOR = {"sim_gpu_operator": True, "sim_gpu_operator_state_s": 0.03, "k3_driver_backend": "gpu-operator",
            "k3_gpu_operator_pool_label": POOL, "k3_gpu_operator_pool": "r580"}
PROGRESSION = ["upgrade-required", "cordon-required", "wait-for-jobs-required", "pod-deletion-required",
               "drain-required", "pod-restart-required", "validation-required", "uncordon-required", "upgrade-done"]
HOST_PACKAGE_TOOLS = ("apt", "apt-get", "apt-cache", "apt-mark", "dpkg", "dpkg-query", "dnf", "yum", "rpm", "dkms",
                      "modprobe", "rmmod", "reboot", "systemctl stop", "systemctl disable")


def run(tmp_path: Path, hosts: dict, timeout: str = "30s") -> tuple[int, Path]:
    inv = write_inventory(tmp_path / "inv", hosts)
    playbook = write_playbook(tmp_path / "pb.yml", min_serving=0,
                              stage_with={"driver_upgrade": {"operator_timeout": timeout}})
    run_dir = tmp_path / "run"
    return main(["run", str(playbook), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]), run_dir


def label_changes(run_dir: Path, node: str, key: str) -> list:
    out = []
    for c in api_changes(run_dir, node):
        verb, _, rest = c.split(" ", 2) if c.count(" ") >= 2 else (c, "", "")
        if verb == "PATCH" and rest.startswith("{"):
            labels = (json.loads(rest).get("metadata") or {}).get("labels") or {}
            if key in labels:
                out.append(labels[key])
    return out


def call_answer(run_dir: Path, node: str, step: str) -> tuple[dict, dict]:
    done = [r for r in journal(run_dir) if r.get("node") == node and r.get("type") == "step_done"
            and r.get("kind") == "api" and r.get("step") == step]
    assert done, f"no api call {step} journaled for {node}"
    ev = (run_dir / "evidence" / done[-1]["evidence"]).read_text()
    return done[-1], json.loads(ev.split("--- answer ---\n", 1)[1].split("\n--- error ---", 1)[0] or "null")


def stage_facts(run_dir: Path, node: str, stage: str) -> dict:
    return next(r["facts"] for r in journal(run_dir) if r["type"] == "facts" and r.get("node") == node
                and r.get("stage") == stage)


def host_package_commands(run_dir: Path, node: str) -> list[str]:
    return [c for c in commands(run_dir, node) if c.split(" ")[0] in HOST_PACKAGE_TOOLS
            or c.startswith(HOST_PACKAGE_TOOLS)]


def test_canary_through_the_gpu_operator_moves_the_pool_label_and_waits_for_upgrade_done(tmp_path):
    # a containerd node whose serving pod a Deployment owns: the drain evicts it
    serving = {"kind": "Deployment", "name": "k2-serving", "node_selector": {"kubernetes.io/hostname": "gpu-01"}}
    code, run_dir = run(tmp_path, {"gpu-01": {**OPERATOR, "sim_k8s_serving": serving}})
    n = result(run_dir)["nodes"]["gpu-01"]
    assert code == 0 and n["final"] == "upgraded", n
    s = sim_state(run_dir, "gpu-01")
    assert s["loaded_driver"] == "580.95.05"
    assert s["scheduler"]["labels"][POOL] == "r580" and s["scheduler"]["labels"][STATE] == "upgrade-done"
    assert s["scheduler"]["state"] == "schedulable"          # the uncordon stage put it back in service
    # the journal: the pool label patch, a once call from the controller, then the watch
    started = {r["step"]: r for r in journal(run_dir) if r.get("node") == "gpu-01" and r["type"] == "step_started"
               and r.get("kind") == "api"}
    patch = started["operator-upgrade-pool"]
    assert patch["argv"] == ["PATCH", "nodes/gpu-01", f"{POOL}=r580"] and patch["once"]
    server = yaml.safe_load((run_dir / "sim-hosts" / "kubeconfig").read_text())["clusters"][0]["cluster"]["server"]
    assert patch["ran_on"] == server
    assert started["operator-upgrade-watch"]["argv"][:3] == ["POLL", "nodes/gpu-01", f"label {STATE}"]
    _, pool = call_answer(run_dir, "gpu-01", "nvidiadriver-pool")
    assert pool["matches"] == ["r580"] and pool["version"] == "580.95.05"
    done, watched = call_answer(run_dir, "gpu-01", "operator-upgrade-watch")
    assert done["rc"] == 0 and watched["final"] == "upgrade-done"
    # what the watch saw is the operator's progression, in order, ending upgrade-done
    states = [x for x in watched["states"] if x is not None]
    assert states[-1] == "upgrade-done" and states == sorted(states, key=PROGRESSION.index), states
    # the operator went through every state (the API server's audit log), after our label patch
    assert label_changes(run_dir, "gpu-01", STATE) == PROGRESSION
    changes = api_changes(run_dir, "gpu-01")
    i_pool = changes.index(f'PATCH nodes/gpu-01 {{"metadata": {{"labels": {{"{POOL}": "r580"}}}}}}')
    i_drain = max(i for i, c in enumerate(changes) if c.endswith("/eviction"))
    assert i_drain < i_pool                     # drained before the driver changed
    facts = stage_facts(run_dir, "gpu-01", "driver_upgrade")
    assert facts["driver_backend"] == "gpu-operator" and facts["gpu_operator_states"] == watched["states"]
    assert facts["driver_version"] == facts["module_version"] == "580.95.05"
    # nothing of the host package path ran: no package tool, no reboot
    assert host_package_commands(run_dir, "gpu-01") == [] and s["boots"] == 0


def test_upgrade_failed_fails_the_stage_and_rollback_restores_the_pool_and_driver(tmp_path):
    code, run_dir = run(tmp_path, {"gpu-01": {**OPERATOR, "sim_faults": ["gpu_operator_upgrade_fails"]}})
    assert code == 1
    n = result(run_dir)["nodes"]["gpu-01"]
    assert (n["final"], n["failed_stage"]) == ("rolled_back", "driver_upgrade"), n
    assert f"{STATE}=upgrade-failed" in n["reason"]
    done, watched = call_answer(run_dir, "gpu-01", "operator-upgrade-watch")
    assert done["rc"] == 1 and watched["final"] == "upgrade-failed"
    # the rollback moved the node back to the pool baseline recorded, and waited again
    assert stage_facts(run_dir, "gpu-01", "baseline")["gpu_operator_pool"] == "r575"
    assert stage_facts(run_dir, "gpu-01", "driver_upgrade")["gpu_operator_states"][-1] == "upgrade-failed"
    plan = next(r for r in journal(run_dir) if r["type"] == "rollback_plan" and r.get("node") == "gpu-01")
    restore = next(x for x in plan["steps"] if x["action"] == "restore_driver")
    assert (restore["backend"], restore["pool_label"], restore["pool"]) == ("gpu-operator", POOL, "r575")
    assert label_changes(run_dir, "gpu-01", POOL) == ["r580", "r575"]
    _, back = call_answer(run_dir, "gpu-01", "restore-operator-watch")
    assert back["final"] == "upgrade-done"
    rb = next(r for r in journal(run_dir) if r["type"] == "rollback_done" and r.get("node") == "gpu-01")
    got = {a["action"]: a["status"] for a in rb["results"]}
    assert got["restore_driver"] == "done" and got["uncordon_if_healthy"] == "done", rb
    s = sim_state(run_dir, "gpu-01")
    assert s["loaded_driver"] == "575.57.08" and s["scheduler"]["labels"][POOL] == "r575"
    assert s["scheduler"]["state"] == "schedulable"
    assert host_package_commands(run_dir, "gpu-01") == []


def test_operator_that_never_finishes_fails_the_stage_at_its_timeout(tmp_path):
    hosts = {"gpu-01": {**OPERATOR, "sim_gpu_operator_state_s": 60}}
    code, run_dir = run(tmp_path, hosts, timeout="1s")
    n = result(run_dir)["nodes"]["gpu-01"]
    assert code == 1 and n["failed_stage"] == "driver_upgrade", n
    assert "did not reach upgrade-done" in n["reason"] and "within 1s" in n["reason"]
    assert host_package_commands(run_dir, "gpu-01") == []


def test_operator_backend_on_a_node_the_operator_does_not_manage_is_refused_at_baseline(tmp_path):
    hosts = {"gpu-01": {k: v for k, v in OPERATOR.items() if not k.startswith("sim_")}}
    code, run_dir = run(tmp_path, hosts, timeout="1s")
    n = result(run_dir)["nodes"]["gpu-01"]
    assert code == 1 and (n["final"], n["failed_stage"]) == ("failed", "baseline"), n
    assert "does not run this node's driver" in n["reason"] and "Nothing was changed" in n["reason"]
    assert api_changes(run_dir, "gpu-01") == []
    assert host_package_commands(run_dir, "gpu-01") == []


def test_preflight_of_an_operator_node_checks_the_operator_and_queries_no_host_package(tmp_path):
    code, rep, _ = preflight(tmp_path, {"op": dict(OPERATOR), "plain": {k: v for k, v in OPERATOR.items()
                                                                           if not k.startswith("sim_")}})
    assert code == 1
    assert failed(rep, "op") == {} and list(failed(rep, "plain")) == ["gpu_operator"]
    checks = {c["check"] for c in rep["nodes"]["op"]["checks"]}
    assert "gpu_operator" in checks and not checks & {"target_packages", "rollback_packages"}
    assert not [c for c in ran(tmp_path / "pre" / "sim-hosts" / "op") if c.startswith(HOST_PACKAGE_TOOLS)]


def test_operator_backend_needs_its_pool_vars(tmp_path, capsys):
    hosts = {"gpu-01": {"sim_gpu_operator": True, "k3_driver_backend": "gpu-operator"}}
    code, _ = run(tmp_path, hosts)
    assert code == 2
    err = capsys.readouterr().err
    assert "gpu-01" in err and "k3_gpu_operator_pool_label" in err and "hosts.yml" in err


def test_credentials_check_asks_for_the_nvidiadriver_pools_only_where_the_operator_backend_is_used(tmp_path):
    from k3rollout.engine.k8s_access import check_access
    from k3rollout.model.inventory import load_inventory
    from k3sim.dispatch import init_cluster
    from k3sim.kubeapi import KubeApiServer

    root = tmp_path / "cluster"
    init_cluster(root, {"gpu-01": {}})
    with KubeApiServer(root) as srv:
        cfg = srv.kubeconfig(tmp_path / "kubeconfig", token="sim-viewer-token")
        for backend, asked in ((None, False), ("gpu-operator", True)):
            hv = {"k3_kubeconfig": str(cfg), **({"k3_driver_backend": "gpu-operator", "k3_gpu_operator_pool": "r580",
                                                 "k3_gpu_operator_pool_label": POOL} if backend else {})}
            inv = load_inventory(write_inventory(tmp_path / f"inv-{backend}", {"gpu-01": hv}))
            (got,) = check_access(dict(inv.hosts), inv.path)
            pools = [c for c in got["checks"] if c["resource"] == "nvidiadrivers"]
            assert bool(pools) == asked
            if asked:
                assert pools[0]["verb"] == "list" and pools[0]["allowed"]      # a viewer may list


def test_prestage_on_an_operator_node_stages_the_image_but_no_host_package(tmp_path):
    """The operator's driver container brings the driver: pre-staging checks disk space and
    pulls the image, and says why it fetched no driver package."""
    from k3sim import state as st

    inv = write_inventory(tmp_path / "inv", {"gpu-01": dict(OPERATOR)})
    digest = st.REGISTRY["vllm/vllm-openai:kimi-k3"]["digest"]
    playbook = write_playbook(tmp_path / "pb.yml", min_serving=0, prestage={"parallel": 1, "image_digest": digest},
                              stage_with={"driver_upgrade": {"operator_timeout": "30s"}})
    run_dir = tmp_path / "run"
    assert main(["run", str(playbook), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 0
    assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    assert host_package_commands(run_dir, "gpu-01") == []
    # into the store the kubelet reads (a containerd node)
    assert any(c.startswith("crictl pull") for c in commands(run_dir, "gpu-01"))
    facts = stage_facts(run_dir, "gpu-01", "prestage")["prestage"]
    assert "GPU Operator" in facts["packages_note"] and "packages" not in facts
