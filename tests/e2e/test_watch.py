"""`k3rollout watch`: the live view of a run from another terminal, read-only, following the
journal as it grows; and the run's own view, which a closed terminal does not stop.

Runs are held still by a gate waiting for `approve`, so what the terminal shows is compared
with what the journal holds at that moment; every wait is on a journal or screen condition
with a generous deadline, never on elapsed time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, assert_reports_match_journal, cli, journal_so_far, result, write_inventory, write_playbook
from support.background import FAST, Run, approve, setup
from support.term import Term


def test_watch_follows_a_run_in_progress_and_never_disturbs_it(tmp_path):
    pb, inv, run_dir = setup(tmp_path, stage_set={"driver_upgrade": {"pause": {"reason": "CAB approval"}}})
    run = Run(pb, inv, run_dir)
    run.wait_for_pause("batch1-before-driver_upgrade")
    # what the journal holds now: gpu-01 of batch 1 stands before its driver_upgrade stage
    node_state = [r for r in journal_so_far(run_dir) if r["type"] == "node_state" and r["node"] == "gpu-01"][-1]
    assert node_state["stage"] == "driver_upgrade"

    w = Term(["watch", str(run_dir)])
    w.wait_for(lambda t: "batch 1/2" in t and "gpu-01" in t and "driver_upgrade: waiting for approval" in t
               and f"k3rollout approve {run_dir} --pause batch1-before-driver_upgrade" in t)
    w.type(b"\x03")                               # Ctrl-C, typed into its terminal
    assert w.wait(60) == 130

    # a watch into a pipe (one line per event), killed outright while it follows
    k = subprocess.Popen([sys.executable, "-m", "k3rollout", "watch", str(run_dir)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    for line in k.stdout:
        if "WAITING at batch1-before-driver_upgrade" in line:
            assert f"k3rollout approve {run_dir} --pause batch1-before-driver_upgrade" in line
            break
    k.kill()
    k.wait(30)

    # a watch that follows the run to its end, and stops by itself there
    follow = Term(["watch", str(run_dir)])
    follow.wait_for(lambda t: "waiting for approval" in t)
    approve(run_dir, "batch1-before-driver_upgrade")
    run.wait_for_pause("batch2-before-driver_upgrade")
    follow.wait_for(lambda t: "batch 2/2" in t and "gpu-02" in t and "batch2-before-driver_upgrade" in t)
    approve(run_dir, "batch2-before-driver_upgrade")
    assert run.wait() == 0, "".join(run.out)
    assert follow.wait(60) == 0
    last = follow.text[follow.text.rindex("batch 2/2"):]
    assert "2/2 nodes" in last and "run completed" in last
    assert result(run_dir)["status"] == "completed"
    assert_reports_match_journal(run_dir)


def tree(root: Path) -> dict[str, tuple]:
    """Every file and folder under ``root``: kind, size, mtime (ns), inode and, for files, content."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (p.is_dir(), st.st_size, st.st_mtime_ns, st.st_ino,
                                             None if p.is_dir() else p.read_bytes())
    st = root.lstat()
    out["."] = (True, st.st_size, st.st_mtime_ns, st.st_ino, None)
    return out


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A run that ended (gpu-02 fails CUDA init: failure, triage, rollback, halt)."""
    d = tmp_path_factory.mktemp("finished")
    inv = write_inventory(d / "inv", {"gpu-01": {}, "gpu-02": {"sim_faults": ["cuda_init_fails"]}},
                          {"sim_reboot_s": 0.01})
    pb = write_playbook(d / "pb.yml", serial=[1], min_serving=0)
    p = cli("run", str(pb), "-i", str(inv), "--yes", "--plain", "--no-preflight", "--run-dir", str(d / "run"),
            env={"K3ROLLOUT_LOCK_DIR": str(d / "locks")})
    assert p.returncode == 1, p.stderr            # halted: batch 2's only node failed
    return d / "run"


def test_watch_writes_nothing_under_the_run_dir(finished_run, tmp_path):
    before = tree(finished_run)
    # started from inside the run directory: anything written relative to it would land there
    w = Term(["watch", str(finished_run)], cwd=finished_run, env={"PYTHONDONTWRITEBYTECODE": ""})
    assert w.wait(90) == 0                        # a finished run: the view is drawn and watch ends
    text = w.text
    assert "run halted" in text and "HALTED (failure)" in text
    row = next(line for line in text.splitlines() if "gpu-02" in line and "cuda_check" in line)
    assert "container_runtime" in row and "done" in row
    piped = subprocess.run([sys.executable, "-m", "k3rollout", "watch", str(finished_run)], capture_output=True,
                           text=True, cwd=finished_run, timeout=600)
    assert piped.returncode == 0 and "run halted" in piped.stdout and "\x1b[" not in piped.stdout
    shown = subprocess.run([sys.executable, "-m", "k3rollout", "metrics", str(finished_run)], capture_output=True,
                           text=True, cwd=finished_run, timeout=600)
    assert shown.returncode == 0 and "k3rollout_nodes" in shown.stdout
    assert tree(finished_run) == before


def test_a_closed_terminal_leaves_the_run_going(tmp_path):
    pb, inv, run_dir = setup(tmp_path)
    t = Term(["run", str(pb), "-i", str(inv), "--yes", "--no-preflight", "--run-dir", str(run_dir)])
    t.wait_for(lambda text: "batch 1/2" in text)   # the live view is up
    t.close()                                      # the window is closed: a hangup, then no terminal
    assert t.wait(180) == 0
    res = result(run_dir)
    assert res["status"] == "completed" and {n["final"] for n in res["nodes"].values()} == {"upgraded"}


def test_watch_stops_when_the_run_is_gone_and_resume_shows_the_run_so_far(tmp_path):
    pb, inv, run_dir = setup(tmp_path, stage_set={"driver_upgrade": {"pause": {}}})
    run = Run(pb, inv, run_dir)
    run.wait_for_pause("batch1-before-driver_upgrade")
    run.proc.send_signal(signal.SIGKILL)
    run.wait()
    p = cli("watch", str(run_dir), "--plain")
    assert p.returncode == 0
    assert "gone and the run did not finish" in p.stderr and f"k3rollout resume {run_dir}" in p.stderr
    # `resume` draws the same view: what happened before it (read back from the journal, since
    # the engine hands over only the records it appends) and the gate it waits at again
    t = Term(["resume", str(run_dir)], env=FAST)
    t.wait_for(lambda x: "batch 1/2" in x and "driver_upgrade: waiting for approval" in x
               and f"k3rollout approve {run_dir} --pause batch1-before-driver_upgrade" in x)
    approve(run_dir, "batch1-before-driver_upgrade")
    t.wait_for(lambda x: "batch 2/2" in x and "batch2-before-driver_upgrade" in x)
    approve(run_dir, "batch2-before-driver_upgrade")
    assert t.wait(180) == 0
    assert "run completed" in t.text and result(run_dir)["status"] == "completed"


def test_a_run_left_held_at_a_gate_is_killed_when_its_test_ends(tmp_path):
    # a test that fails while its background run waits for `approve` would leave the run paused
    # for good; tests/conftest.py calls stop_left_behind() after every test
    from support import background

    pb, inv, run_dir = setup(tmp_path, stage_set={"driver_upgrade": {"pause": {"reason": "CAB approval"}}})
    run = Run(pb, inv, run_dir)
    run.wait_for_pause("batch1-before-driver_upgrade")
    assert background.stop_left_behind() == [run.proc.pid]
    assert run.proc.poll() is not None and background.stop_left_behind() == []
