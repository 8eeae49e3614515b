"""Which walker runs a stage (engine/walkers): the one of the stage kind's declared scope,
with a replica-scoped stage run per node when the node's replica is one node or the play
has no replicas."""

from __future__ import annotations

from types import SimpleNamespace

from k3rollout.engine.walkers.scopes import Scopes
from k3rollout.model.playbook import STAGE_TABLES

REPLICAS = [{"id": "r0", "nodes": ["gpu-01", "gpu-02"]}, {"id": "r1", "nodes": ["gpu-04"]}]


def _scopes(replicas: list[dict]) -> Scopes:
    return Scopes(SimpleNamespace(plan={"batches": [], "replicas": replicas}))


def test_a_node_of_a_multinode_replica_runs_each_stage_in_its_kinds_scope():
    s = _scopes(REPLICAS)
    assert {k: s.of("gpu-01", k) for k in STAGE_TABLES.order} == {k.name: k.scope for k in STAGE_TABLES.kinds}
    assert s.of("gpu-02", "multinode") == "batch" and s.of("gpu-02", "cordon") == "node"
    assert s.of("gpu-02", "vllm_smoke") == "replica" and s.of("gpu-02", "features") == "replica"


def test_serving_stages_run_per_node_on_a_one_node_replica_and_without_replicas():
    assert _scopes(REPLICAS).of("gpu-04", "vllm_smoke") == "node"
    assert _scopes([]).of("gpu-01", "vllm_smoke") == "node"
    assert _scopes([]).of("gpu-01", "multinode") == "batch"


def test_a_batch_hands_each_stage_its_nodes_wait_before_to_the_walker_of_its_scope(stage_harness, monkeypatch):
    hosts = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    e = stage_harness(hosts={h: {} for h in hosts}).engine
    states = {"gpu-01": "smoke-test-required", "gpu-02": "smoke-test-required",
              "gpu-03": "multinode-test-required", "gpu-04": "smoke-test-required"}
    monkeypatch.setattr(e.view, "plan", {"batches": [{"index": 1, "nodes": hosts}], "replicas": REPLICAS,
                                         "groups": {"r0": ["gpu-01", "gpu-02"], "r1": ["gpu-04"]}})
    monkeypatch.setattr(e.view, "node", lambda n: SimpleNamespace(state=states[n]))
    advanced: list[str] = []
    monkeypatch.setattr(e.node_walker, "advance", lambda n, held, before_cordon: advanced.append(n))
    ran: list[tuple[str, str, list[str]]] = []

    def walker(name, done):
        def run(nodes, kind):
            assert len(ran) < 4, ran            # (a wrong choice would call a walker again and again)
            ran.append((name, kind, sorted(n for n in nodes if states[n] == done)))
            for n in nodes:
                if states[n] == done and (name == "batch" or n != "gpu-04"):
                    states[n] = "upgrade-done"
        return run

    monkeypatch.setattr(e.replica_walker, "run", walker("replica", "smoke-test-required"))
    monkeypatch.setattr(e.batch_walker, "run", walker("batch", "multinode-test-required"))
    e.run_batch(hosts, 1)
    # the two-node replica's serving stage goes to the replica walker, the multinode stage to the
    # batch walker; gpu-04 (a one-node replica) is left to its node walker at its serving stage
    assert ran == [("replica", "vllm_smoke", ["gpu-01", "gpu-02", "gpu-04"]),
                   ("batch", "multinode", ["gpu-03"])]
    assert states["gpu-04"] == "smoke-test-required" and set(advanced) == set(hosts)
    assert e.walker("multinode") is e.batch_walker and e.walker("features") is e.replica_walker
