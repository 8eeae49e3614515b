"""The driver backend is a protocol (stages/driver): ``driver_backend_for`` picks the
implementation for a host's ``k3_driver_backend``, a recorded restore step names its own, and
the stages ask the backend instead of branching on its kind."""

from __future__ import annotations

import inspect

import pytest

from k3rollout.stages import driver, driver_upgrade
from k3rollout.stages.base import StageOutcome
from k3rollout.stages.driver import BACKENDS, RestoreParams, driver_backend_for, driver_backend_named
from k3rollout.stages.driver.base import DriverBackend
from k3rollout.stages.driver.gpu_operator import GpuOperator
from k3rollout.stages.driver.host import HostPackages

PROTOCOL = [n for n, v in vars(DriverBackend).items() if inspect.isfunction(v) and not n.startswith("_")]
OPERATOR_VARS = {"k3_driver_backend": "gpu-operator", "k3_gpu_operator_pool_label": "driver.config",
                 "k3_gpu_operator_pool": "r580"}


def test_the_host_var_picks_the_backend_and_host_packages_is_the_default():
    assert isinstance(driver_backend_for({}), HostPackages)
    assert isinstance(driver_backend_for({"k3_driver_backend": "host"}), HostPackages)
    assert isinstance(driver_backend_for(OPERATOR_VARS), GpuOperator)
    with pytest.raises(ValueError, match="k3_driver_backend: 'dkms' is not one of gpu-operator, host"):
        driver_backend_for({"k3_driver_backend": "dkms"})


def test_every_registered_backend_is_registered_under_its_kind_and_implements_the_protocol():
    assert set(PROTOCOL) >= {"baseline_facts", "owner_facts", "upgrade", "restore_plan", "describe_restore",
                             "restore", "preflight_owner", "preflight", "prestage"}
    assert sorted(BACKENDS) == ["gpu-operator", "host"]
    for name, backend in BACKENDS.items():
        assert backend.kind == name
        assert isinstance(backend.uses_kubernetes_api, bool)
        for method in PROTOCOL:
            have = inspect.signature(getattr(backend, method))
            want = inspect.signature(getattr(DriverBackend, method))
            assert list(have.parameters) == list(want.parameters)[1:], (name, method)


def test_a_recorded_restore_step_is_run_by_the_backend_that_planned_it():
    baseline = {"driver_version": "575.57.08", "pkg_mgr": "apt", "gpu_operator_pool_label": "driver.config",
                "gpu_operator_pool": "r575"}
    for tvars in ({}, OPERATOR_VARS):
        planner = driver_backend_for(tvars)
        step: dict = {"action": "restore_driver", "undoes": "driver_upgrade"}
        planner.restore_plan(step, "gpu-01", baseline, tvars, RestoreParams())
        # a host step names no backend (as recorded before the protocol), an operator step does
        assert ("backend" in step) is (planner.kind != "host")
        assert driver_backend_named(step.get("backend")) is planner
    assert driver_backend_named(None) is BACKENDS["host"]


def test_the_preflight_owner_check_is_the_backends():
    assert BACKENDS["host"].preflight_owner(False, {}) == (True, "host-installed driver")
    ok, why = BACKENDS["host"].preflight_owner(True, {})
    assert not ok and "k3_driver_backend: gpu-operator" in why
    assert BACKENDS["gpu-operator"].preflight_owner(True, OPERATOR_VARS)[0] is True
    assert BACKENDS["gpu-operator"].preflight_owner(False, OPERATOR_VARS)[0] is False
    assert [b.kind for b in BACKENDS.values() if b.uses_kubernetes_api] == ["gpu-operator"]


class Recording:
    """A third backend, as one would be added: registered under its kind."""

    kind = "recording"
    uses_kubernetes_api = False

    def __init__(self) -> None:
        self.asked: list[str] = []

    def upgrade(self, ctx):
        self.asked.append(f"upgrade {ctx.node}")
        return StageOutcome(True, "", {"driver_backend": self.kind})


def test_the_driver_stage_asks_the_nodes_backend(monkeypatch):
    fake = Recording()
    monkeypatch.setitem(driver.BACKENDS, "recording", fake)

    class Ctx:
        node = "gpu-01"
        vars = {"k3_driver_backend": "recording"}

    out = driver_upgrade.run(Ctx())     # type: ignore[arg-type]
    assert out.passed and out.facts == {"driver_backend": "recording"}
    assert fake.asked == ["upgrade gpu-01"]
