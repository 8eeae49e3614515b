"""Each stage kind owns its undo: the kind declares its rollback actions (model/playbook.py's
``STAGE_KINDS``, an ``Undo`` each) and its module says how each is planned, shown and run
(``StageSpec.undo``). stages/rollback.py is a loop over the declared actions in
``ROLLBACK_ORDER`` that asks the owning kind; these tests replace the kinds' actions with
recording ones and watch the loop ask them."""

from __future__ import annotations

import dataclasses

import pytest
from support import PLAYBOOK, write_playbook

from k3rollout.model import load_playbook
from k3rollout.model.playbook import ROLLBACK_ORDER, ROLLBACK_UNDOES, STAGE_KINDS, STAGE_TABLES
from k3rollout.stages import rollback
from k3rollout.stages.base import StageOutcome
from k3rollout.stages.registry import SPECS
from k3rollout.stages.spec import StageSpec, UndoAction


def test_every_declared_action_runs_as_its_owning_kind_says():
    declared = {u.action: k.name for k in STAGE_KINDS for u in k.undone_by}
    assert declared == ROLLBACK_UNDOES
    assert set(ROLLBACK_ORDER) <= set(declared)
    for name, owner in declared.items():
        assert rollback.action(name) is SPECS[owner].undo[name]
    # each kind's module runs exactly the actions its kind declares
    assert {k: sorted(s.undo) for k, s in SPECS.items() if s.undo} == {
        "cordon": ["quarantine", "uncordon_if_healthy"], "driver_upgrade": ["restore_driver"],
        "vllm_smoke": ["restore_serving_image", "stop_test_server"]}


def test_a_spec_that_does_not_run_what_its_kind_declares_fails_at_import():
    cordon = STAGE_TABLES.kind("cordon")
    with pytest.raises(ValueError, match="declares the rollback actions uncordon_if_healthy, quarantine, and its "
                                         "spec runs uncordon_if_healthy"):
        StageSpec(cordon, run=lambda ctx: StageOutcome(True),
                  undo={"uncordon_if_healthy": SPECS["cordon"].undo["uncordon_if_healthy"]})
    with pytest.raises(ValueError, match="declares the rollback actions none, and its spec runs restore_driver"):
        StageSpec(STAGE_TABLES.kind("cuda_check"), run=lambda ctx: StageOutcome(True),
                  undo={"restore_driver": SPECS["driver_upgrade"].undo["restore_driver"]})


class Recorder:
    def __init__(self, fail: set[str] = frozenset()) -> None:
        self.asked: list[tuple[str, str]] = []
        self.fail = fail

    def install(self, monkeypatch) -> None:
        for name, owner in ROLLBACK_UNDOES.items():
            monkeypatch.setitem(SPECS[owner].undo, name, self.action(name))

    def action(self, name: str) -> UndoAction:
        def plan(step, p):
            self.asked.append(("plan", name))
            return {**step, "planned_for": p.node, "reboot": p.declared.reboot}

        def describe(step):
            self.asked.append(("describe", name))
            return f"{name} as its kind says"

        def execute(ctx, step, untouched):
            self.asked.append(("execute", name))
            return name not in self.fail, f"{name} ran (untouched: {untouched})"
        return UndoAction(plan, describe, execute)


class Ctx:
    node = "gpu-01"
    workload = object()          # no close_node: nothing opened the node for checks

    def __init__(self) -> None:
        self.published: list[str] = []

    def publish_progress(self, state: str) -> None:
        self.published.append(state)


def test_the_plan_and_its_text_are_the_owning_kinds_in_rollback_order(monkeypatch):
    rec = Recorder()
    rec.install(monkeypatch)
    playbook = load_playbook(PLAYBOOK)
    steps = rollback.plan_rollback(playbook, "gpu-01", {}, {})
    order = [a for a in ROLLBACK_ORDER if a in {rb.action for s in playbook.stages for rb in s.rollback}]
    assert order == ["stop_test_server", "restore_driver", "restore_serving_image", "uncordon_if_healthy"]
    assert rec.asked == [("plan", a) for a in order]
    assert [(s["action"], s["undoes"], s["planned_for"]) for s in steps] == [
        (a, ROLLBACK_UNDOES[a], "gpu-01") for a in order]
    assert next(s for s in steps if s["action"] == "restore_driver")["reboot"] is True
    rec.asked.clear()
    assert [rollback.describe(s) for s in steps] == [f"{a} as its kind says" for a in order]
    assert rec.asked == [("describe", a) for a in order]


def steps(*actions: str) -> list[dict]:
    return [{"action": a, "undoes": ROLLBACK_UNDOES[a]} for a in actions]


def test_execution_asks_each_kind_for_what_started_and_publishes_after_the_uncordon(monkeypatch):
    rec = Recorder()
    rec.install(monkeypatch)
    ctx = Ctx()
    ok, results = rollback.execute(ctx, steps("stop_test_server", "restore_driver", "restore_serving_image",  # type: ignore[arg-type]
                                              "uncordon_if_healthy"), {"cordon", "driver_upgrade"},
                                   untouched="the install never started")
    assert ok
    # the smoke test never started; its serving containers are owed after the driver change
    assert [(r["action"], r["status"]) for r in results] == [
        ("stop_test_server", "not_needed"), ("restore_driver", "done"), ("restore_serving_image", "done"),
        ("uncordon_if_healthy", "done")]
    assert rec.asked == [("execute", "restore_driver"), ("execute", "restore_serving_image"),
                         ("execute", "uncordon_if_healthy")]
    assert results[1]["detail"] == "restore_driver ran (untouched: the install never started)"
    assert ctx.published == ["upgrade-failed"]


def test_a_failed_driver_restore_skips_the_rest_but_the_quarantine(monkeypatch):
    rec = Recorder(fail={"restore_driver"})
    rec.install(monkeypatch)
    ctx = Ctx()
    ok, results = rollback.execute(ctx, steps("stop_test_server", "restore_driver", "restore_serving_image",  # type: ignore[arg-type]
                                              "quarantine"), {"cordon", "driver_upgrade", "vllm_smoke"})
    assert not ok
    assert [(r["action"], r["status"]) for r in results] == [
        ("stop_test_server", "done"), ("restore_driver", "failed"), ("restore_serving_image", "skipped"),
        ("quarantine", "done")]
    assert results[2]["detail"] == STAGE_TABLES.undos["restore_driver"].failure_stops_rest
    assert rec.asked == [("execute", "stop_test_server"), ("execute", "restore_driver"), ("execute", "quarantine")]
    assert ctx.published == ["upgrade-failed"]
    # a node the rollback cannot reach: only what needs the scheduler alone
    rec.asked.clear()
    assert [r["action"] for r in rollback.unreachable(ctx, steps("restore_driver", "quarantine"))] == ["quarantine"]  # type: ignore[arg-type]
    assert rec.asked == [("execute", "quarantine")]


def test_the_plan_shows_and_reserves_what_the_kinds_declare(monkeypatch, tmp_path):
    from k3rollout.plan.planner import rollback_estimate, rollback_steps_preview

    playbook = load_playbook(PLAYBOOK)
    docker = {"k3_workload_backend": "docker"}
    assert rollback_steps_preview(playbook, {"driver_version": "575.57.08", **docker}) == [
        "stop_test_server: stop and remove the k3rollout test vLLM container",
        "restore_driver: reinstall driver packages recorded by baseline (expected 575.57.08), reboot, verify "
        "nvidia-smi and the kernel module",
        "restore_serving_image: restart the serving container on the image digest baseline records",
        "uncordon_if_healthy: uncordon only if the node was schedulable before the run and passes GPU health "
        "checks; otherwise keep it cordoned"]
    assert rollback_steps_preview(playbook, docker)[1].startswith(
        "restore_driver: reinstall driver packages recorded by baseline (expected the version baseline records)")
    # each node in the words of its own backends: a Kubernetes node (the default scheduler's
    # default) runs Pods its owners bring back, a Slurm node jobs, a GPU Operator node's driver
    # is the operator's container, moved by its pool label
    k8s = rollback_steps_preview(playbook, {"driver_version": "575.57.08"})
    assert k8s[0] == "stop_test_server: delete the k3rollout test server Pods on the node through the API server"
    assert k8s[2].startswith("restore_serving_image: check that the owners of the node's serving Pods still run")
    assert k8s[1] == rollback_steps_preview(playbook, {"driver_version": "575.57.08", **docker})[1]
    slurm = rollback_steps_preview(playbook, {"scheduler": "slurm"})
    assert slurm[0] == "stop_test_server: scancel the k3rollout test server jobs on the node"
    assert slurm[2].startswith("restore_serving_image: nothing to restart: a Slurm node runs no serving containers")
    operator = rollback_steps_preview(playbook, {"driver_version": "575.57.08", "k3_driver_backend": "gpu-operator"})
    assert operator[1].startswith("restore_driver: move the node back to the GPU Operator's NVIDIADriver pool")
    assert operator[1].endswith("report 575.57.08") and "reinstall" not in operator[1] and "reboot" not in operator[1]
    # on_node_failure: quarantine keeps a failed node cordoned and marked in place of the uncordon
    quarantined = load_playbook(write_playbook(tmp_path / "pb.yml", on_node_failure="quarantine"))
    q = rollback_steps_preview(quarantined, docker)
    assert q[:3] == rollback_steps_preview(playbook, docker)[:3] and len(q) == 4
    assert q[3].startswith("quarantine: keep the node cordoned and mark it quarantined")
    driver_s = next(s.estimate_s for s in playbook.stages if s.stage == "driver_upgrade")
    assert rollback_estimate(playbook) == 3 * 60.0 + driver_s
    # the planner holds no text or estimate of its own: a kind's declaration is what it shows
    undo = STAGE_TABLES.undos["stop_test_server"]
    monkeypatch.setitem(STAGE_TABLES.undos, "stop_test_server",
                        dataclasses.replace(undo, plan_text="remove the test servers", estimate_s=7.0))
    assert rollback_steps_preview(playbook, docker)[0] == "stop_test_server: remove the test servers"
    assert rollback_estimate(playbook) == 7.0 + 2 * 60.0 + driver_s


def test_the_recorded_serving_restore_is_told_as_the_nodes_workloads_do_it():
    # on Kubernetes the rollback checks the owners' images (it starts nothing by hand); on a
    # Docker host it restarts the containers; a Slurm node has none. A step recorded before the
    # plan named its workload reads as before
    from k3rollout.stages.vllm_smoke import describe_restore_serving

    pod = {"name": "inference/k3-0", "image": "vllm/vllm-openai:v0.11.0", "digest": "sha256:1d2c3b4a59681234abcd"}
    k8s = describe_restore_serving({"containers": [pod], "workload": "kubernetes"})
    assert k8s.startswith("restore_serving_image: check that the owners of inference/k3-0 on vllm/vllm-openai:")
    assert "restart" not in k8s
    docker = describe_restore_serving({"containers": [pod], "workload": "docker"})
    assert docker.startswith("restore_serving_image: restart inference/k3-0 on vllm/vllm-openai:v0.11.0@")
    assert describe_restore_serving({"containers": [pod]}) == docker
    assert describe_restore_serving({"containers": [], "workload": "slurm"}).startswith(
        "restore_serving_image: nothing to restart")
