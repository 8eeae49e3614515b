"""The run lock is per cluster, not per inventory file or user: keyed by the hosts' addresses
and the cluster id, in a directory every user's runs see."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import write_inventory

from k3rollout.engine import lock as lk
from k3rollout.errors import LockHeld
from k3rollout.model import load_inventory


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
