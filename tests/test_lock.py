"""The run lock is per cluster, not per inventory file or user: keyed by the hosts' addresses
and the cluster id, in a directory every user's runs see."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from support import race_for_lock, write_inventory

from k3rollout.errors import LockHeld
from k3rollout.model import load_inventory
from k3rollout.runlog import lock as lk


def _lock(inv: Path, run_dir: Path) -> lk.RunLock:
    return lk.RunLock(load_inventory(str(inv)), run_dir, "2026-12-03T01:00:00Z")


def test_a_copy_a_hard_link_or_overlapping_hosts_meet_the_same_lock(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {"ansible_host": "10.0.0.2"}})
    held = _lock(inv, tmp_path / "run-a")
    umask = os.umask(0o077)                 # the CLI's: lock files must stay readable all the same
    try:
        held.acquire()
    finally:
        os.umask(umask)
    try:
        copy = tmp_path / "copy" / "hosts.yml"
        copy.parent.mkdir()
        shutil.copy(inv, copy)
        link = tmp_path / "link.yml"
        os.link(inv, link)
        # the same host under another inventory name, reached at the same address
        alias = write_inventory(tmp_path / "alias", {"gpu-x": {"ansible_host": "10.0.0.2"}, "gpu-09": {}})
        overlap = write_inventory(tmp_path / "overlap", {"gpu-01": {}, "gpu-03": {}})
        for other in (copy, link, alias, overlap):
            with pytest.raises(LockHeld, match="another k3rollout run holds host") as e:
                _lock(other, tmp_path / "run-b").acquire()
            assert "run-a" in str(e.value)
        # a refused run leaves nothing behind, so the holder's files are all still there, and
        # any user can read who holds them, whatever the umask
        assert sorted(held.taken) == lk.lock_paths(load_inventory(str(inv)))
        assert {p.stat().st_mode & 0o777 for p in held.taken} == {0o644}
        disjoint = _lock(write_inventory(tmp_path / "disjoint", {"gpu-05": {}}), tmp_path / "run-c")
        disjoint.acquire()
        disjoint.release()
    finally:
        held.release()
    assert not list(lk.lock_dir().glob("*.lock"))


def test_a_cluster_id_locks_the_whole_cluster(tmp_path):
    a = write_inventory(tmp_path / "a", {"gpu-01": {}}, {"k3_cluster_id": "prod-east"})
    b = write_inventory(tmp_path / "b", {"gpu-02": {}}, {"k3_cluster_id": "prod-east"})
    c = write_inventory(tmp_path / "c", {"gpu-03": {}}, {"k3_cluster_id": "prod-west"})
    held = _lock(a, tmp_path / "run-a")
    held.acquire()
    try:
        with pytest.raises(LockHeld, match="cluster prod-east"):
            _lock(b, tmp_path / "run-b").acquire()
        other = _lock(c, tmp_path / "run-c")
        other.acquire()
        other.release()
    finally:
        held.release()


def test_the_lock_directory_is_system_wide_not_per_home(tmp_path, monkeypatch):
    monkeypatch.delenv("K3ROLLOUT_LOCK_DIR")
    monkeypatch.setattr(lk, "SYSTEM_DIRS", (tmp_path / "run-lock" / "k3rollout",))
    (tmp_path / "run-lock").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home-a"))
    a = lk.lock_dir()
    monkeypatch.setenv("HOME", str(tmp_path / "home-b"))
    assert lk.lock_dir() == a == tmp_path / "run-lock" / "k3rollout"
    assert a.stat().st_mode & 0o7777 == 0o1777         # any user may lock, none may remove another's lock
    # where no system-wide directory can be used, the fallback says so
    monkeypatch.setattr(lk, "SYSTEM_DIRS", (tmp_path / "missing" / "k3rollout",))
    assert lk.lock_dir() == tmp_path / "home-b" / ".cache" / "k3rollout" / "locks"


def test_host_keys_follow_the_address_the_inventory_resolves():
    assert lk.host_key("gpu-01", {}) == "gpu-01:22"
    assert lk.host_key("GPU-01.example.com.", {}) == "gpu-01.example.com:22"
    assert lk.host_key("x", {"ansible_host": "10.0.0.10"}) == "10.0.0.10:22"
    assert lk.host_key("x", {"ansible_host": "2001:DB8:0:0::1", "ansible_port": 2222}) == "2001:db8::1:2222"


def test_resume_of_a_run_that_is_starting_right_now_changes_nothing(tmp_path):
    """A live holder whose journal has no record yet is starting, not dead: resume leaves its
    lock and its journal alone."""
    from k3rollout.engine.session import Session

    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}})
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "journal.jsonl").touch()
    held = _lock(inv, run_dir)
    held.acquire()
    try:
        with pytest.raises(LockHeld, match="starting right now"):
            Session(run_dir).resume()
        assert (run_dir / "journal.jsonl").exists() and all(p.exists() for p in held.taken)
    finally:
        held.release()


# ---------------------------------------------------------------- scheduler: none, a lock on a cluster host


def _dead_pid() -> int:
    import subprocess

    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _none_locks(inv: Path, executor, run_dir: Path, hosts: list[str] | None = None):
    from k3rollout.scheduler.cluster_lock import cluster_locks

    inventory = load_inventory(str(inv))
    return cluster_locks(inventory, hosts or list(inventory.hosts), executor, str(run_dir), "2026-12-03T01:00:00Z",
                         f"id-{run_dir.name}")


def test_two_inventories_of_one_none_cluster_from_two_controllers_exactly_one_proceeds(tmp_path):
    """Two inventory files (other nodes, other order) and two controllers (each its own
    executor and lock files) racing for one ``scheduler: none`` cluster: its lock directory,
    made with mkdir on the first host of the first group, admits exactly one."""
    from k3sim.state import executed
    from k3sim.transport import SimExecutor

    cluster = tmp_path / "cluster"
    a = write_inventory(tmp_path / "a", {"gpu-01": {}, "gpu-02": {}}, {"scheduler": "none"})
    b = write_inventory(tmp_path / "b", {"gpu-01": {}, "gpu-03": {}}, {"scheduler": "none"})

    def run(inv: Path, name: str):
        def make():
            ex = SimExecutor(cluster, {h: {} for h in ("gpu-01", "gpu-02", "gpu-03")})
            return _none_locks(inv, ex, tmp_path / name, hosts=[h for h in load_inventory(str(inv)).hosts
                                                                if h != "gpu-01"])
        return make

    won, refused = race_for_lock(run(a, "run-a"), run(b, "run-b"))
    lock = won.locks[0]
    assert lock.where == "gpu-01" and lock.path == "/var/tmp/k3rollout-lock.host-gpu-01:22"
    assert won.servers() == ["/var/tmp/k3rollout-lock.host-gpu-01:22 on gpu-01"]
    assert "another k3rollout run holds the cluster lock /var/tmp/k3rollout-lock.host-gpu-01:22 on gpu-01" in \
        refused or "names no holder" in refused
    assert lock.holder()["run_dir"] == lock.info["run_dir"]
    won.release()
    assert lock.holder() is None
    log = executed(cluster / "gpu-01")
    assert log.count("mkdir /var/tmp/k3rollout-lock.host-gpu-01:22") == 2 and \
        log.count("rm -rf /var/tmp/k3rollout-lock.host-gpu-01:22") == 1


def test_a_stale_none_lock_survives_a_reboot_is_reported_and_only_unlock_takes_it(tmp_path):
    import time

    from k3rollout.errors import HostUnreachable
    from k3rollout.scheduler.cluster_lock import HostLock, me
    from k3sim.transport import SimExecutor

    ex = SimExecutor(tmp_path / "cluster", {"gpu-01": {"sim_reboot_s": 0.01}, "gpu-02": {}})
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {}},
                          {"scheduler": "none", "k3_cluster_id": "lab-7", "k3_lock_host": "gpu-02"})
    dead = {**me(str(tmp_path / "dead-run"), "2026-12-03T01:00:00Z", "20261203T010000-dead00"), "pid": _dead_pid()}
    HostLock(ex, "gpu-02", "lab-7", "/var/tmp", dead).acquire()
    # the lock host reboots (it may be a node of the rollout): /var/tmp keeps the lock
    assert ex.run("gpu-02", ["reboot"]).rc == 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ex.run("gpu-02", ["true"])
            break
        except HostUnreachable:
            time.sleep(0.02)
    with pytest.raises(LockHeld) as e:
        _none_locks(inv, ex, tmp_path / "run-b").acquire()
    assert "stale cluster lock /var/tmp/k3rollout-lock.lab-7 on gpu-02: its holder is dead" in str(e.value)
    assert f"pid {dead['pid']} " in str(e.value) and "k3rollout unlock PLAYBOOK -i INVENTORY" in str(e.value)
    assert f"k3rollout resume {tmp_path / 'dead-run'}" in str(e.value)
    kept = HostLock(ex, "gpu-02", "lab-7", "/var/tmp", dead)
    assert kept.holder()["pid"] == dead["pid"]                           # not stolen
    # the run itself (a resume) takes its own lock again
    mine = _none_locks(inv, ex, tmp_path / "dead-run")
    mine.locks[0].info["user"], mine.locks[0].info["host"] = dead["user"], dead["host"]
    mine.acquire()
    assert kept.holder()["pid"] == os.getpid()
    # a live holder is never unlocked; a gone one is
    with pytest.raises(LockHeld, match="another k3rollout run holds"):
        kept.unlock()
    mine.locks[0].held = False
    ex.run("gpu-02", ["tee", "/var/tmp/k3rollout-lock.lab-7/holder"], stdin=b'{"pid": 1, "host": "elsewhere"}')
    assert kept.unlock() == {"pid": 1, "host": "elsewhere"}
    b = _none_locks(inv, ex, tmp_path / "run-b")
    b.acquire()
    b.release()
    ex.close()


@pytest.mark.e2e          # real sshd hosts and two whole runs
def test_over_real_sshd_a_second_run_of_a_none_cluster_is_refused_naming_the_holder(sshd_cluster, tmp_path):
    """Two controllers (each its own lock files), two inventory files, real SSH: the lock
    directory on the cluster's first host lets one run through."""
    import subprocess
    import sys
    import time

    from support import cli, journal, journal_so_far, write_playbook

    # the node of a scheduler: none cluster is a Docker host, as the inventories below say
    with sshd_cluster({"gpu-01": {"sim_reboot_s": 0.3, "scheduler": "none"}}) as c:
        inv_a = c.inventory(tmp_path / "a" / "hosts.yml", {"scheduler": "none"})
        inv_b = c.inventory(tmp_path / "b" / "hosts.yml", {"scheduler": "none", "forks": 1})
        pb = write_playbook(tmp_path / "pb.yml", serial=1, min_serving=0, stage_set={"baseline": {"pause": {}}})
        run_a = tmp_path / "run-a"
        env = {**os.environ, "K3ROLLOUT_APPROVAL_POLL_S": "0.05", "K3ROLLOUT_LOCK_DIR": str(tmp_path / "ctl-a")}
        proc = subprocess.Popen([sys.executable, "-m", "k3rollout", "run", str(pb), "-i", str(inv_a), "--yes",
                                 "--plain", "--run-dir", str(run_a)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, env=env)
        try:
            deadline = time.monotonic() + 90
            while not ((run_a / "journal.jsonl").exists() and
                       any(r["type"] == "pause_started" for r in journal_so_far(run_a))):
                assert proc.poll() is None and time.monotonic() < deadline, \
                    proc.stdout.read() if proc.poll() is not None else "slow"
                time.sleep(0.05)
            path = "/var/tmp/k3rollout-lock.host-127.0.0.1:" + str(c.hosts["gpu-01"].port)
            assert journal(run_a)[0]["cluster_lock"] == [f"{path} on gpu-01"]
            b = cli("run", str(pb), "-i", str(inv_b), "--yes", "--run-dir", str(tmp_path / "run-b"),
                    env={"K3ROLLOUT_LOCK_DIR": str(tmp_path / "ctl-b")})
            assert b.returncode == 1, b.stderr
            assert f"another k3rollout run holds the cluster lock {path} on gpu-01: pid {proc.pid} " in b.stderr
            assert str(run_a.resolve()) in b.stderr and not (tmp_path / "run-b" / "journal.jsonl").exists()
            # run A is stopped at its gate: a halted run releases the lock
            assert cli("approve", str(run_a), "--reject").returncode == 0
            assert proc.wait(60) == 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        state = json.loads((c.hosts["gpu-01"].state / "state.json").read_text())
        assert not [p for p in state.get("files", {}) if "k3rollout-lock" in p]
