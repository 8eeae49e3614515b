"""The docker workload backend (k3rollout/workload/docker.py) against the strict fake
executor: its preflight refuses a node without docker before anything else is asked of
it, naming the var that fixes it."""

from __future__ import annotations

from k3rollout.engine.preflight import check_node
from k3rollout.workload import BACKENDS, default_backend, workload_for
from k3rollout.workload.docker import Docker


def test_a_node_without_docker_is_refused_at_preflight_naming_the_backend_var(fake_executor):
    fake_executor.expect(["true"])
    fake_executor.missing(["docker", "info", "--format", "{{.ServerVersion}}"])
    got = check_node(fake_executor, "gpu-01", {"scheduler": "kubernetes", "k3_workload_backend": "docker"}, "580.95.05")
    assert got["ok"] is False
    (connect, workload) = got["checks"]
    assert connect["ok"] and workload["check"] == "workload" and not workload["ok"]
    assert "docker is not installed" in workload["detail"]
    assert "k3_workload_backend: kubernetes" in workload["detail"]
    assert "rc 127" in workload["detail"]
    # the inventory's backend does not fit the node: bad input (exit 2), not the node's state
    assert workload["input"] is True
    # the strict fake's teardown proves nothing else (no package query, no df) was sent


def test_a_docker_daemon_that_does_not_answer_is_refused(fake_executor):
    fake_executor.expect(["docker", "info", "--format", "{{.ServerVersion}}"], rc=1,
                         stderr="Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                                "Is the docker daemon running?\n")
    ok, why, bad_input = Docker().preflight(lambda name, argv: fake_executor.run("gpu-01", argv), {})
    assert not ok and "does not answer" in why and "Is the docker daemon running" in why
    # the node's own state, not the input: a failed preflight (exit 1)
    assert bad_input is False


def test_a_docker_host_passes_the_workload_check(fake_executor):
    fake_executor.expect(["docker", "info", "--format", "{{.ServerVersion}}"], stdout="28.2.2\n")
    ok, why, _ = Docker().preflight(lambda name, argv: fake_executor.run("gpu-01", argv), {})
    assert ok and why == "Docker 28.2.2 answers"


def test_the_backend_var_picks_the_runtime_and_the_default_is_one_place():
    # scheduler: kubernetes (also its default) -> Pods; slurm -> jobs; none -> a Docker host
    from k3rollout import scheduler
    from k3rollout.model import backends
    from k3rollout.stages import driver

    # the rule is data in model/backends.py (the inventory's checks and the plan read it too):
    # its names are the implementations' own
    assert backends.SCHEDULER_DEFAULT == scheduler.DEFAULT
    assert set(backends.WORKLOAD_BACKENDS) == set(BACKENDS) and set(backends.DRIVER_BACKENDS) == set(driver.BACKENDS)
    assert workload_for({}).kind == default_backend({}) == "kubernetes"
    assert workload_for({"scheduler": "kubernetes"}).kind == default_backend({"scheduler": "kubernetes"}) == \
        "kubernetes"
    assert workload_for({"scheduler": "none"}).kind == default_backend({"scheduler": "none"}) == "docker"
    # slurm: jobs through pyxis unless the node's launcher is docker
    assert workload_for({"scheduler": "slurm"}).kind == default_backend({"scheduler": "slurm"}) == "slurm"
    slurm_docker = {"scheduler": "slurm", "k3_container_launcher": "docker"}
    assert workload_for(slurm_docker).kind == default_backend(slurm_docker) == "docker"
    assert workload_for({"k3_workload_backend": "docker", "scheduler": "kubernetes"}) is BACKENDS["docker"]
