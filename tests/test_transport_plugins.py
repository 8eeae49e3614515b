"""Transports registered by other packages (k3rollout/plugins.py): the simulator is one, found
through the ``k3rollout.transports`` entry point of the installed project, and a connection no
package registers is refused by name before any host is touched. k3rollout itself knows no
simulator variable (``sim_*``) and no simulated fault: the simulator (k3sim/) checks its own
variables, and a simulated node's hardware is described with the product's variables."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from support import ROOT

from k3rollout.errors import InputError
from k3rollout.plugins import registered, transport_plugin
from k3rollout.transport.factory import make_executor
from k3sim.hostvars import SIM_FAULTS

SIM_NAMES = re.compile(r"\bsim_[A-Za-z0-9_]+|\bSIM_FAULTS\b|\b(?:" + "|".join(SIM_FAULTS) + r")\b")


def test_the_simulator_is_the_registered_transport_of_its_connection():
    assert "k3sim" in registered()
    plugin = transport_plugin("k3sim")
    assert plugin is not None and type(plugin).__module__ == "k3sim.plugin"
    assert plugin.state_dir == "sim-hosts"
    assert transport_plugin("k3sim") is plugin          # loaded once
    assert transport_plugin("telnet") is None


def test_a_connection_no_package_registers_is_refused_by_name(tmp_path):
    hosts = {"gpu-01": SimpleNamespace(vars={"ansible_connection": "telnet"})}
    with pytest.raises(InputError, match=r"ansible_connection 'telnet' is not supported: use ssh or paramiko, "
                                         r"or a registered transport \(.*k3sim.*\)"):
        make_executor(hosts, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def simulator_names(text: str) -> list[str]:
    return [f"{n}: {m.group(0)}" for n, line in enumerate(text.splitlines(), 1) for m in SIM_NAMES.finditer(line)]


def test_no_module_of_k3rollout_names_a_simulator_variable_or_fault():
    found = [f"{path.relative_to(ROOT)}:{hit}" for path in sorted((ROOT / "k3rollout").rglob("*.py"))
             for hit in simulator_names(path.read_text())]
    assert found == [], "k3rollout knows the simulator's names (they belong in k3sim/):\n" + "\n".join(found)


def test_the_check_finds_a_simulator_variable_or_fault():
    assert simulator_names('v.get("sim_driver")\nfaults = SIM_FAULTS\nif "cuda_init_fails" in f:\n') == [
        "1: sim_driver", "2: SIM_FAULTS", "3: cuda_init_fails"]
    assert simulator_names('v.get("driver_version") or is_sim_host(v)  # k3sim') == []


def test_the_simulator_checks_its_own_variables_and_a_simulated_nodes_hardware():
    plugin = transport_plugin("k3sim")
    assert plugin is not None
    assert plugin.check_host_vars({"sim_faults": ["nccl_broke"]})[0] == "sim_faults"
    assert plugin.check_host_vars({"sim_gpu_count": 65}) == ("sim_gpu_count", "must be between 1 and 64")
    sim = {"ansible_connection": "k3sim"}
    assert plugin.check_host_vars({**sim, "k3_gpu_count": 0}) == ("k3_gpu_count", "must be between 1 and 64")
    assert plugin.check_host_vars({**sim, "driver_version": "r580"})[0] == "driver_version"
    # a real host's product variables are the product's to check, not the simulator's
    assert plugin.check_host_vars({"k3_gpu_count": 0, "driver_version": "r580"}) is None
    assert plugin.check_host_vars({**sim, "driver_version": "575.57.08", "k3_gpu_count": 8}) is None
    assert plugin.out_of_service({**sim, "sim_cordoned": True})
    assert not plugin.out_of_service(sim)
    assert plugin.hardware_class({**sim, "k3_gpu_model": "NVIDIA B300 SXM6 AC"}) == "NVIDIA B300 SXM6 AC"
    assert plugin.hardware_class(sim) == "NVIDIA H200"


def test_inventory_loading_takes_its_connections_from_the_registered_transports(tmp_path):
    # the inventory knows the connections from the registry, not from a list of names: an
    # unregistered one is refused with its file and line, naming what is registered
    from k3rollout.model import load_inventory

    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    gpu-01:\n      ansible_connection: telnet\n")
    with pytest.raises(InputError, match=r"'telnet' is not a connection k3rollout drives \(k3sim, paramiko, ssh\)") \
            as err:
        load_inventory(inv)
    assert f"{inv}:" in str(err.value)
    # a host of a registered transport is not dialled by its name, so any inventory name goes;
    # over SSH the same name is refused without an ansible_host
    inv.write_text("all:\n  hosts:\n    gpu_01:\n      ansible_connection: k3sim\n      k3_gpu_model: B300\n")
    assert list(load_inventory(inv).hosts) == ["gpu_01"]
    inv.write_text("all:\n  hosts:\n    gpu_01:\n      ansible_connection: ssh\n")
    with pytest.raises(InputError, match="dialled by its name"):
        load_inventory(inv)
