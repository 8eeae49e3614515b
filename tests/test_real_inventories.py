"""Real public inventories (tests/data/inventories/real, sources in each file's header):
NVIDIA DeepOps' and Kubespray's INI examples, which name their GPU nodes in their own groups
and set no ``ansible_connection``."""

from __future__ import annotations

import json

import pytest
from support import DATA, PLAYBOOK, ROOT, cli

from k3rollout.cli import main
from k3rollout.model import load_inventory, load_playbook
from k3rollout.model.inputs import apply_overrides
from k3rollout.plan import make_plan
from k3rollout.transport.factory import connection_kind

REAL = DATA / "inventories" / "real"


@pytest.fixture
def known_hosts(tmp_path):
    f = tmp_path / "known_hosts"
    f.write_text("")
    return str(f)


def test_deepops_inventory_names_its_groups_when_the_play_matches_none(capsys):
    assert main(["plan", str(PLAYBOOK), "-i", str(REAL / "deepops.ini")]) == 2
    err = capsys.readouterr().err
    assert "deepops.ini" in err and "hosts pattern 'gpu_nodes'" in err
    for group in ("kube-node", "slurm-node", "slurm-master", "kube-master", "etcd"):
        assert group in err
    assert "-e k3_hosts=GROUP" in err


@pytest.mark.parametrize(("inventory", "group", "scheduler", "nodes", "where"), [
    ("deepops.ini", "slurm-node", "slurm", ["gpu01", "gpu02"], "scontrol on the controller"),
    ("kubespray.ini", "kube-node", "none", ["node2", "node3", "node4", "node5", "node6"], "nothing to cordon"),
])
def test_a_real_inventory_plans_its_gpu_group_over_ssh_never_on_the_simulator(
        capsys, known_hosts, inventory, group, scheduler, nodes, where):
    """The shipped playbook takes the GPU nodes' group from -e k3_hosts; hosts with no
    ansible_connection are SSH hosts, as Ansible dials them, never simulated ones."""
    # the shipped play plans Kimi K3 replicas; these inventories name no GPUs, so -e gives them
    # (8 x B300 per node: one node per replica, so the batches still take the nodes in order)
    args = ("plan", str(PLAYBOOK), "-i", str(REAL / inventory), "-e", f"k3_hosts={group}",
            "-e", f"scheduler={scheduler}", "-e", f"k3_known_hosts_file={known_hosts}",
            "-e", '{"k3_gpu_model": "NVIDIA B300 SXM6 AC", "k3_gpu_count": 8, "k3_gpu_mem_gib": 268}')
    code = main([*args, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    plan = json.loads(out.out)
    assert plan["hosts"] == nodes
    assert [n for b in plan["batches"] for n in b["nodes"]] == nodes
    assert main(list(args)) == 0
    text = capsys.readouterr().out
    assert where in text and "simulated" not in text
    inv = load_inventory(REAL / inventory)
    playbook, inv = apply_overrides(load_playbook(PLAYBOOK), inv, {"extra_vars": {
        "k3_hosts": group, "k3_gpu_model": "NVIDIA B300 SXM6 AC", "k3_gpu_count": 8, "k3_gpu_mem_gib": 268}})
    picked = make_plan(playbook, inv).hosts
    assert connection_kind({h: inv.hosts[h] for h in picked}) == "ssh"


@pytest.mark.e2e          # against the real ansible-inventory
def test_the_inventory_verb_matches_ansible_inventory_on_real_inventories():
    import subprocess

    from support import ansible_tool

    for name in ("deepops.ini", "kubespray.ini"):
        ours = json.loads(cli("inventory", "-i", str(REAL / name), "--list").stdout)
        ref = json.loads(subprocess.run([ansible_tool("ansible-inventory"), "-i", str(REAL / name), "--list"],
                                        capture_output=True, text=True, check=True, cwd=ROOT).stdout)
        for data in (ours, ref):
            data["_meta"].pop("profile", None)
        assert ours == ref, name
    kubespray = load_inventory(REAL / "kubespray.ini")
    # the INI inline comment after ansible_host is a comment, not part of the value
    assert kubespray.hosts["node2"].vars["ansible_host"] == "95.54.0.13"
