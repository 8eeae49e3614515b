"""``scheduler: kubernetes`` from the controller: every operation is a journaled request to
the (simulated) Kubernetes API server through the official client, never a command on the
node being changed; a PodDisruptionBudget that never yields fails the cordon stage and the
node is restored; a node that never boots is still quarantined through the API; a node
whose driver the GPU Operator runs is refused before anything changes; and the cluster's
Lease lets exactly one run proceed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from support import (
    DOCKER_HOST,
    api_changes,
    cli,
    commands,
    journal,
    race_for_lock,
    result,
    sim_state,
    write_inventory,
    write_playbook,
)

from k3rollout.cli import main
from k3rollout.errors import LockHeld
from k3rollout.scheduler.k8s_api import KubernetesApi
from k3rollout.scheduler.k8s_lock import ClusterLeases
from k3sim.dispatch import init_cluster
from k3sim.kubeapi import KubeApiServer

STATE = "k3rollout.io/upgrade-state"


def run(tmp_path: Path, inv: Path, pb: Path) -> tuple[int, Path]:
    run_dir = tmp_path / "run"
    return main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]), run_dir


def api_steps(run_dir: Path, node: str) -> list[dict]:
    return [r for r in journal(run_dir) if r.get("node") == node and r.get("kind") == "api"]


def test_scheduler_operations_are_api_calls_from_the_controller_journaled_with_the_server(tmp_path):
    # a Docker host (cri-dockerd): its serving pod, which no owner recreates, is what the drain evicts
    inv = write_inventory(tmp_path / "inv", {"gpu-01": dict(DOCKER_HOST)})
    code, run_dir = run(tmp_path, inv, write_playbook(tmp_path / "pb.yml", min_serving=0))
    assert code == 0 and result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
    # nothing of the scheduler ran on the node itself
    assert not any(c.startswith("kubectl") for c in commands(run_dir, "gpu-01"))
    server = yaml.safe_load((run_dir / "sim-hosts" / "kubeconfig").read_text())["clusters"][0]["cluster"]["server"]
    steps = api_steps(run_dir, "gpu-01")
    assert steps and {r["ran_on"] for r in steps} == {server}
    started = {r["step"]: r for r in steps if r["type"] == "step_started"}
    assert started["drain"]["once"] and started["uncordon"]["once"]
    done = next(r for r in steps if r["type"] == "step_done" and r["step"] == "drain")
    ev = (run_dir / "evidence" / done["evidence"]).read_text()
    answer = json.loads(ev.split("--- answer ---\n", 1)[1].split("\n--- error ---", 1)[0])
    # the serving pod was evicted, the DaemonSet's pod left alone
    assert [p.split("/")[0] for p in answer["evicted"]] == ["inference"]
    assert [p.split("/")[0] for p in answer["left_alone"]] == ["gpu-operator"]
    # the progress label went through every state, in order, and ended upgrade-done
    labels = [json.loads(c.split(" ", 2)[2])["metadata"]["labels"][STATE] for c in api_changes(run_dir, "gpu-01")
              if STATE in c]
    assert labels == ["cordon-required", "upgrade-required", "validation-required", "uncordon-required",
                      "upgrade-done"]
    assert sim_state(run_dir, "gpu-01")["scheduler"]["labels"][STATE] == "upgrade-done"


def test_pdb_blocking_eviction_fails_cordon_at_drain_timeout_and_restores_the_node(tmp_path):
    # a Docker host (cri-dockerd) whose serving pod a PodDisruptionBudget holds
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {**DOCKER_HOST, "sim_faults": ["pdb_blocks_eviction"]}})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0, stage_with={"cordon": {"drain_timeout": "2s"}})
    started = time.monotonic()
    code, run_dir = run(tmp_path, inv, pb)
    assert code == 1
    n = result(run_dir)["nodes"]["gpu-01"]
    assert (n["final"], n["failed_stage"]) == ("rolled_back", "cordon"), n
    assert "disruption budget" in n["reason"] and "timed out after 2s" in n["reason"]
    assert time.monotonic() - started < 60
    changes = api_changes(run_dir, "gpu-01")
    # cordoned, the eviction refused (429, retried: nothing evicted), then uncordoned again
    spec = [c for c in changes if "unschedulable" in c]
    assert spec == ['PATCH nodes/gpu-01 {"spec": {"unschedulable": true}}',
                    'PATCH nodes/gpu-01 {"spec": {"unschedulable": null}}']
    assert not any(c.endswith("/eviction") for c in changes)      # refused evictions change nothing
    assert sim_state(run_dir, "gpu-01")["scheduler"]["state"] == "schedulable"
    assert sim_state(run_dir, "gpu-01")["scheduler"]["labels"][STATE] == "upgrade-failed"
    # never upgraded
    assert not any(c.startswith(("apt-get install", "reboot")) for c in commands(run_dir, "gpu-01"))
    done = next(r for r in api_steps(run_dir, "gpu-01") if r["type"] == "step_done" and r["step"] == "drain")
    assert done["rc"] == 1 and "DisruptionBudget" not in done["error"] and "disruption budget" in done["error"]
    ev = (run_dir / "evidence" / done["evidence"]).read_text()
    assert '"attempts":' in ev and "k2-serving" in ev


def test_node_that_never_boots_is_still_quarantined_through_the_api(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_faults": ["no_boot_after_upgrade"]}},
                          {"sim_reboot_s": 0.01})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0, reboot_timeout=2, reboot_grace=1,
                        on_node_failure="quarantine", failure_budget="100%")
    code, run_dir = run(tmp_path, inv, pb)
    assert code == 1
    n = result(run_dir)["nodes"]["gpu-01"]
    assert n["failed_stage"] == "driver_upgrade"
    rb = next(r for r in journal(run_dir) if r["type"] == "rollback_done" and r.get("node") == "gpu-01")
    got = {a["action"]: a["status"] for a in rb["results"]}
    assert got == {"reach_host": "failed", "quarantine": "done"}, rb
    s = sim_state(run_dir, "gpu-01")["scheduler"]
    assert s["state"] == "cordoned" and s["labels"][STATE] == "quarantined"
    assert s["labels"]["k3rollout.io/quarantine"] == journal(run_dir)[0]["run_id"]


def test_gpu_operator_managed_driver_is_refused_before_anything_changes(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_faults": ["gpu_operator_driver"]}})
    code, run_dir = run(tmp_path, inv, write_playbook(tmp_path / "pb.yml", min_serving=0))
    assert code == 1
    n = result(run_dir)["nodes"]["gpu-01"]
    assert (n["final"], n["failed_stage"]) == ("failed", "baseline")
    assert "GPU Operator manages this node's driver" in n["reason"] and "refused" in n["reason"]
    # the fix that exists: k3rollout upgrades through the operator's pools (issue #33 item 3)
    for var in ("k3_driver_backend: gpu-operator", "k3_gpu_operator_pool_label", "k3_gpu_operator_pool"):
        assert var in n["reason"], n["reason"]
    assert api_changes(run_dir, "gpu-01") == []
    assert not any(c.startswith(("apt-get", "reboot")) for c in commands(run_dir, "gpu-01"))
    assert sim_state(run_dir, "gpu-01")["scheduler"]["state"] == "schedulable"


# ---------------------------------------------------------------- the cluster's Lease


@pytest.fixture
def api_server(tmp_path):
    root = tmp_path / "cluster"
    init_cluster(root, {"gpu-01": {}})
    with KubeApiServer(root) as srv:
        yield srv, srv.kubeconfig(tmp_path / "kubeconfig")


def targets(cfg: Path) -> dict:
    return {(str(cfg), None, "kube-system", "k3rollout"): ["gpu-01"]}


def test_two_runs_racing_for_the_lease_exactly_one_wins(api_server):
    _, cfg = api_server
    won, refused = race_for_lock(*(lambda i=i: ClusterLeases(targets(cfg), f"run-{i}") for i in (1, 2)))
    holder = won.holder
    assert holder in refused and "kubectl -n kube-system delete lease k3rollout" in refused
    api = KubernetesApi(str(cfg))
    assert api.lease("kube-system", "k3rollout").holder == holder
    won.release()
    assert api.lease("kube-system", "k3rollout") is None
    api.close()


def test_an_expired_lease_of_another_run_is_reported_never_taken(api_server):
    _, cfg = api_server
    api = KubernetesApi(str(cfg))
    old = (datetime.now(timezone.utc) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    api.coord.create_namespaced_lease("kube-system", {
        "metadata": {"name": "k3rollout"},
        "spec": {"holderIdentity": "k3rollout/dead-run ops@elsewhere", "leaseDurationSeconds": 300,
                 "renewTime": old, "acquireTime": old}})
    with pytest.raises(LockHeld) as exc:
        ClusterLeases(targets(cfg), "new-run").acquire()
    assert "k3rollout/dead-run ops@elsewhere" in str(exc.value) and "expired" in str(exc.value)
    assert api.lease("kube-system", "k3rollout").holder == "k3rollout/dead-run ops@elsewhere"     # not stolen
    # the same run (a resume) renews its own lease
    mine = ClusterLeases(targets(cfg), "dead-run")
    mine.holder = "k3rollout/dead-run ops@elsewhere"
    mine.acquire()
    assert not api.lease("kube-system", "k3rollout").expired
    mine.release()
    api.close()


def test_two_inventory_files_on_one_cluster_only_one_run_proceeds(tmp_path):
    # run A pauses before its cordon, holding its cluster's Lease
    inv_a = write_inventory(tmp_path / "a", {"gpu-01": {}}, {"sim_reboot_s": 0.01})
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0, serial=[1], stage_set={"cordon": {"pause": {}}})
    run_a = tmp_path / "run-a"
    env = {**os.environ, "K3ROLLOUT_APPROVAL_POLL_S": "0.05"}
    proc = subprocess.Popen([sys.executable, "-m", "k3rollout", "run", str(pb), "-i", str(inv_a), "--yes", "--plain",
                             "--run-dir", str(run_a)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    try:
        deadline = time.monotonic() + 60
        while not ((run_a / "journal.jsonl").exists() and
                   any(r["type"] == "pause_started" for r in journal(run_a))):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else "slow"
            time.sleep(0.05)
        kubeconfig = run_a / "sim-hosts" / "kubeconfig"
        # run B: another inventory file naming the same cluster, from another controller (its
        # own lock files, which know nothing of run A): only the cluster's Lease can stop it
        inv_b = write_inventory(tmp_path / "b", {"gpu-01": {}}, {"k3_kubeconfig": str(kubeconfig)})
        b = cli("run", str(pb), "-i", str(inv_b), "--yes", "--run-dir", str(tmp_path / "run-b"),
                env={"K3ROLLOUT_LOCK_DIR": str(tmp_path / "controller-b-locks")})
        assert b.returncode == 1, b.stderr
        assert "another k3rollout run holds this cluster" in b.stderr and f":{run_a.resolve()}'" in b.stderr
        assert not (tmp_path / "run-b" / "journal.jsonl").exists()
        assert journal(run_a)[0]["cluster_lock"][0].endswith("Lease kube-system/k3rollout")
        assert cli("approve", str(run_a)).returncode == 0
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_plan_shows_where_scheduler_operations_run_and_checks_credentials_read_only(api_server, tmp_path):
    srv, admin = api_server
    viewer = srv.kubeconfig(tmp_path / "viewer-kubeconfig", user="viewer", token="sim-viewer-token")
    pb = write_playbook(tmp_path / "pb.yml", min_serving=0)
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {"scheduler": "none"}},
                          {"k3_kubeconfig": str(admin)})
    p = cli("plan", str(pb), "-i", str(inv), "--check-access")
    assert p.returncode == 0, p.stderr
    assert f"  gpu-01: Kubernetes API {srv.url} (kubeconfig {admin}), from the controller" in p.stdout
    assert "  gpu-02: no scheduler: nothing to cordon" in p.stdout
    assert f"credentials for {srv.url} (1 nodes): ok" in p.stdout
    assert "yes create pods/eviction: evict pods" in p.stdout and "yes update leases.coordination.k8s.io" in p.stdout
    # a viewer may read but not cordon, evict or take the lock: refused, exit 2
    inv2 = write_inventory(tmp_path / "inv2", {"gpu-01": {}}, {"k3_kubeconfig": str(viewer)})
    p = cli("plan", str(pb), "-i", str(inv2), "--check-access")
    assert p.returncode == 2 and "MISSING RIGHTS" in p.stdout
    assert "yes get nodes: read nodes" in p.stdout and "NO  patch nodes" in p.stdout
    assert "NO  create pods/eviction" in p.stdout and "NO  create leases.coordination.k8s.io" in p.stdout
    # the check asked the authorizer only: nothing in the cluster changed
    assert not [r for r in srv.requests if r[0] != "GET" and "selfsubjectaccessreviews" not in r[1]]
    assert srv.cluster.root.joinpath("gpu-01", "kube-audit.log").exists() is False
