"""The same playbook over real SSH: paramiko against real sshd test hosts on loopback,
each serving a simulated GPU node (tests/support/sshd_hosts.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support import journal, result, write_playbook

from k3rollout.cli import main
from k3rollout.errors import ConnectionLost, HostUnreachable
from k3rollout.model import load_inventory
from k3rollout.transport.ssh import HostKeyError, SSHExecutor
from k3sim.state import executed


def state(c, host: str) -> dict:
    return json.loads((c.hosts[host].state / "state.json").read_text())


@pytest.mark.long
def test_full_rollout_over_ssh_on_eight_hosts(sshd_cluster, tmp_path):
    hosts = {f"gpu-{i:02d}": {} for i in range(1, 9)}
    hosts["gpu-02"] = {"sim_faults": ["ssh_drops"]}
    hosts["gpu-03"] = {"sim_faults": ["driver_install_fails"]}
    hosts["gpu-07"] = {"sim_faults": ["cuda_init_fails"]}
    with sshd_cluster(hosts) as c:
        inv = c.inventory(tmp_path / "inv" / "hosts.yml")
        pb = write_playbook(tmp_path / "pb.yml", serial=4, min_serving=0, max_fail_percentage=25, reboot_timeout=30)
        run_dir = tmp_path / "run"
        code = main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
        r = result(run_dir)
        assert code == 0, r
        assert r["status"] == "completed"
        finals = {n: v["final"] for n, v in r["nodes"].items()}
        assert finals.pop("gpu-07") == finals.pop("gpu-03") == "rolled_back"
        assert set(finals.values()) == {"upgraded"}
        assert r["nodes"]["gpu-07"]["triage"] == "container_runtime"
        assert "Install the pinned NVIDIA driver packages" in r["nodes"]["gpu-03"]["reason"]
        for h in hosts:
            want = "575.57.08" if h in ("gpu-03", "gpu-07") else "580.95.05"
            assert state(c, h)["loaded_driver"] == want and state(c, h)["scheduler"]["state"] == "schedulable"
        # each node rebooted once for the upgrade (twice for the rolled-back one), and the
        # install whose connection dropped was settled, not repeated
        # (gpu-03 never rebooted into a new driver: its install failed, the restore rebooted it once)
        assert {h: state(c, h)["boots"] for h in hosts} == {h: 2 if h == "gpu-07" else 1 for h in hosts}
        recs = journal(run_dir)
        # the vendor steps ran as Ansible task files: events journaled, artifacts kept
        tasks = {x["task"] for x in recs if x["type"] == "ansible_event" and x["event"] == "runner_on_ok"}
        assert {"Install the pinned NVIDIA driver packages", "Reboot into the new driver and wait for the node",
                "Check the loaded kernel module"} <= tasks
        assert list((run_dir / "ansible" / "gpu-01").glob("*/artifacts/*/stdout"))
        # gpu-02 lost its connection during the install: settled by probing, the idempotent
        # task file re-run once, the packages installed once (the re-run was a no-op)
        assert any(x["type"] == "step_error" and x["node"] == "gpu-02" and x["error"] == "unreachable" for x in recs)
        assert any(x["type"] == "step_settled" and x["node"] == "gpu-02" for x in recs)
        installs = [x for x in executed(c.hosts["gpu-02"].state) if x.startswith("apt-get install")]
        assert len(installs) == 2 and state(c, "gpu-02")["boots"] == 1
        assert r["batches"][0]["status"] == "failed" and r["batches"][1]["status"] == "failed"


def test_unknown_key_wrong_credentials_and_a_host_that_never_returns(sshd_cluster, tmp_path):
    hosts = {"gpu-01": {"sim_faults": ["no_boot_after_upgrade"]}, "gpu-02": {}, "gpu-03": {}}
    with sshd_cluster(hosts) as c:
        # gpu-02's key is not in known_hosts; gpu-03 is offered a key it does not authorise
        lines = c.known_hosts.read_text().splitlines()
        c.known_hosts.write_text("\n".join(x for x in lines if f":{c.hosts['gpu-02'].port} " not in x) + "\n")
        stranger = tmp_path / "stranger"
        import subprocess

        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
        inv = c.inventory(tmp_path / "inv" / "hosts.yml",
                          host_vars={"gpu-03": {"ansible_ssh_private_key_file": str(stranger)}})
        pb = write_playbook(tmp_path / "pb.yml", serial=3, min_serving=0, max_fail_percentage=100, reboot_timeout=2)
        run_dir = tmp_path / "run"
        assert main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)]) == 1
        r = result(run_dir)
        n = r["nodes"]
        # Ansible's reboot module gave up waiting; the rollback cannot reach the node either
        assert n["gpu-01"]["final"] == "rollback_failed"
        assert "Reboot into the new driver" in n["gpu-01"]["reason"] and "Timed out" in n["gpu-01"]["reason"]
        reach = n["gpu-01"]["rollback"]["results"][0]
        assert reach["action"] == "reach_host" and reach["status"] == "failed"
        assert (n["gpu-02"]["final"], n["gpu-02"]["failed_stage"]) == ("failed", "baseline")
        assert "UNKNOWN" in n["gpu-02"]["reason"] and "known_hosts" in n["gpu-02"]["reason"]
        assert (n["gpu-03"]["final"], n["gpu-03"]["failed_stage"]) == ("failed", "baseline")
        assert "authentication failed" in n["gpu-03"]["reason"]
        assert r["halt"]["kind"] == "rollback_failed"
        # the refused hosts were never changed, and every step the run started was closed
        assert executed(c.hosts["gpu-02"].state) == [] and executed(c.hosts["gpu-03"].state) == []
        recs = journal(run_dir)
        started = {(x["node"], x["key"]) for x in recs if x["type"] == "step_started"}
        closed = {(x["node"], x["key"]) for x in recs if x["type"] in ("step_done", "step_error", "step_settled")}
        assert started <= closed
        assert state(c, "gpu-01")["scheduler"]["state"] in ("cordoned", "drained")


def test_changed_host_key_is_refused(sshd_cluster, tmp_path):
    with sshd_cluster({"gpu-01": {}, "gpu-02": {}}) as c:
        # swap the two hosts' keys in known_hosts: each now presents a key we do not expect
        p1, p2 = c.hosts["gpu-01"].port, c.hosts["gpu-02"].port
        c.known_hosts.write_text(f"[127.0.0.1]:{p1} ssh-ed25519 {c.hosts['gpu-02'].host_pub}\n"
                                 f"[127.0.0.1]:{p2} ssh-ed25519 {c.hosts['gpu-01'].host_pub}\n")
        inv = load_inventory(c.inventory(tmp_path / "hosts.yml"))
        ex = SSHExecutor({n: h.vars for n, h in inv.hosts.items()})
        with pytest.raises(HostKeyError, match="CHANGED"):
            ex.run("gpu-01", ["true"])
        ex.close()


def test_executor_basics_and_error_translation(sshd_cluster, tmp_path):
    # a Docker host: its serving container answers on the node's port 8001
    with sshd_cluster({"gpu-01": {"sim_reboot_s": 3, "sim_container_runtime": "docker"}}) as c:
        inv = load_inventory(c.inventory(tmp_path / "hosts.yml"))
        ex = SSHExecutor({n: h.vars for n, h in inv.hosts.items()})
        r = ex.run("gpu-01", ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        assert r.ok and r.stdout.splitlines() == ["575.57.08"] * 8
        hostile = "x'; touch /tmp/k3-ssh-pwned; echo '$(id)"
        r = ex.run("gpu-01", ["curl", "-sS", "-d", "@-", "http://127.0.0.1:8001/v1/models"], stdin=hostile.encode())
        assert r.ok and not Path("/tmp/k3-ssh-pwned").exists()
        try:
            ex.run("gpu-01", ["reboot"])      # may return first, or lose its session as the host goes down
        except ConnectionLost:
            pass
        # the host is down for 3 s: once its sshd and sessions are gone, refused, never a silent success
        deadline = time.time() + 3
        while (c.hosts["gpu-01"].running or c.hosts["gpu-01"].sessions) and time.time() < deadline:
            time.sleep(0.01)
        assert state(c, "gpu-01")["down_until"] > time.time(), "the test host was not seen down in its 3 s"
        with pytest.raises((HostUnreachable, ConnectionLost)):
            ex.run("gpu-01", ["true"])
        waited = ex.wait_for_host("gpu-01", 15)
        assert 0 < waited < 15 and state(c, "gpu-01")["boots"] == 1
        boot = ex.run("gpu-01", ["cat", "/proc/sys/kernel/random/boot_id"]).stdout
        assert boot.strip() == state(c, "gpu-01")["boot_id"]
        ex.close()
    with pytest.raises(HostUnreachable):
        SSHExecutor({n: h.vars for n, h in inv.hosts.items()}).run("gpu-01", ["true"])


def test_strict_host_key_checking_needs_a_known_hosts_file(tmp_path):
    from k3rollout.errors import InputError

    with pytest.raises(InputError, match="known_hosts"):
        SSHExecutor({"h": {"ansible_host": "127.0.0.1", "k3_known_hosts_file": str(tmp_path / "none")}})


def test_become_password_is_used_and_never_written_down(sshd_cluster, tmp_path):
    secret = "become-S3cret-5150"
    with sshd_cluster({"gpu-01": {"sim_sudo_password": secret}}) as c:
        inv_path = c.inventory(tmp_path / "inv" / "hosts.yml",
                               {"ansible_become": True, "ansible_become_password": secret})
        inv = load_inventory(inv_path)
        ex = SSHExecutor({n: h.vars for n, h in inv.hosts.items()})
        assert ex.run("gpu-01", ["nvidia-smi", "-L"]).ok
        bad = SSHExecutor({n: {**h.vars, "ansible_become_password": "wrong"} for n, h in inv.hosts.items()})
        r = bad.run("gpu-01", ["nvidia-smi", "-L"])
        assert r.rc == 1 and "incorrect password" in r.stderr
        ex.close()
        bad.close()
        pb = write_playbook(tmp_path / "pb.yml", min_serving=0, reboot_timeout=30)
        run_dir = tmp_path / "run"
        assert main(["run", str(pb), "-i", str(inv_path), "--yes", "--run-dir", str(run_dir)]) == 0
        assert result(run_dir)["nodes"]["gpu-01"]["final"] == "upgraded"
        assert list(run_dir.rglob("vendor-tasks-1-job_events_*"))      # ansible-runner artifacts kept as evidence
        leaks = [str(p) for p in run_dir.rglob("*") if p.is_file() and secret in p.read_text(errors="replace")]
        assert leaks == []
