"""Transports registered by other packages (k3rollout/plugins.py): the simulator is one, found
through the ``k3rollout.transports`` entry point of the installed project, and a connection no
package registers is refused by name before any host is touched."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from k3rollout.errors import InputError
from k3rollout.plugins import registered, transport_plugin
from k3rollout.transport.factory import make_executor


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
