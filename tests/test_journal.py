"""The journal's fast whole-file parse agrees with the careful line-by-line one, and
falls back to it whenever the file is not perfectly well formed."""

from __future__ import annotations

import json
import os

import pytest

from k3rollout.errors import InputError
from k3rollout.runlog import journal as jr


def _write(tmp_path, lines: list[str]) -> object:
    p = tmp_path / "journal.jsonl"
    p.write_text("".join(lines))
    return p


def _recs(n: int) -> list[str]:
    return [json.dumps({"seq": i, "ts": "t", "type": "x", "v": "a\nb" if i == 2 else i}) + "\n" for i in range(1, n + 1)]


def test_fast_and_careful_parse_agree(tmp_path, monkeypatch):
    p = _write(tmp_path, _recs(50))
    fast = jr._parse(p)
    monkeypatch.setattr(jr, "_fast", lambda raw: None)
    assert jr._parse(p) == fast and len(fast[0]) == 50 and fast[2] is None


def test_torn_tail_and_damage_are_still_found(tmp_path):
    lines = _recs(5)
    torn = _write(tmp_path, lines[:4] + [lines[4][:10]])
    recs, good, tail = jr._parse(torn)
    assert len(recs) == 4 and tail == lines[4][:10].encode()
    damaged = _write(tmp_path, lines[:2] + ["{not json\n"] + lines[3:])
    with pytest.raises(InputError) as e:
        jr._parse(damaged)
    assert e.value.line == 3
    two_on_a_line = _write(tmp_path, [lines[0], lines[1].rstrip("\n") + lines[2]] + lines[3:])
    with pytest.raises(InputError):
        jr._parse(two_on_a_line)
    gap = _write(tmp_path, lines[:2] + lines[3:])
    with pytest.raises(InputError, match="jumps from 2 to 4"):
        jr._parse(gap)


# ---------------------------------------------------------------- writes that fail

def _journal(tmp_path, **kw) -> jr.Journal:
    return jr.Journal(tmp_path / "journal.jsonl", lambda: "2026-12-03T01:00:00+00:00", **kw)


def _fill(j: jr.Journal) -> None:
    j.append("run_resumed", pid=1)
    j.append("stage_started", node="gpu-01", stage="cordon", name="cordon")
    j.append("node_state", node="gpu-01", to="cordoned", event="passed", **{"from": "baseline-done"})


def test_a_short_write_stops_the_run_and_leaves_the_journal_whole(tmp_path):
    """A full disk mid-record: the write that does not complete raises before the side
    effect it announces, the partial line is cut off, and no later record is taken."""
    import errno

    budget = [None]

    def write(fd, data):
        if budget[0] is not None:
            if budget[0] <= 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            n = os.write(fd, bytes(data[: budget[0]]))
            budget[0] -= n
            return n
        return os.write(fd, data)

    j = _journal(tmp_path, write=write)
    _fill(j)
    before = (tmp_path / "journal.jsonl").read_bytes()
    budget[0] = 40                                  # room for 40 bytes of the next record
    ran = []
    with pytest.raises(jr.JournalWriteError) as e:
        j.append("step_started", node="gpu-01", stage="driver_upgrade", step="reboot", key="03/reboot",
                 argv=["reboot"], once=True)
        ran.append("reboot")                        # the side effect the record announces
    assert ran == []
    msg = str(e.value)
    assert "record 4" in msg and "No space left" in msg and "intact" in msg and "NOT intact" not in msg
    assert f"k3rollout resume {tmp_path}" in msg
    assert (tmp_path / "journal.jsonl").read_bytes() == before          # the torn line was cut off
    budget[0] = None
    with pytest.raises(jr.JournalWriteError):                           # nothing after it either
        j.append("run_resumed", pid=2)
    j.close()
    assert [r["seq"] for r in jr.Journal.read(tmp_path / "journal.jsonl")] == [1, 2, 3]


def test_a_failed_commit_stops_the_run(tmp_path, monkeypatch):
    import errno

    j = _journal(tmp_path)
    _fill(j)

    def fsync(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(jr.os, "fsync", fsync)
    with pytest.raises(jr.JournalWriteError, match="could not make .* durable"):
        j.append("batch_started", batch=1, nodes=["gpu-01"])
    with pytest.raises(jr.JournalWriteError):
        j.append("run_resumed", pid=2)


def test_a_closed_journal_takes_no_record_even_when_its_fd_number_is_reused(tmp_path):
    """Shutdown closes the journal only after the workers stopped; a record that still came
    would, before, land in whatever file got the descriptor number next."""
    j = _journal(tmp_path)
    _fill(j)
    fd = j._fd
    j.close()
    other = os.open(tmp_path / "MANIFEST.sha256", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        assert other == fd
        with pytest.raises(jr.JournalWriteError, match="closed"):
            j.append("run_resumed", pid=2)
    finally:
        os.close(other)
    assert (tmp_path / "MANIFEST.sha256").read_bytes() == b""


# ---------------------------------------------------------------- hash chain and record types

def test_any_edit_anywhere_breaks_the_hash_chain(tmp_path):
    import random

    j = _journal(tmp_path)
    _fill(j)
    j.append("rollback_plan", node="gpu-01", batch=1, steps=[{"action": "restore_driver", "version": "575.57.08"}])
    j.append("run_finished", status="completed")
    j.close()
    path = tmp_path / "journal.jsonl"
    good = path.read_bytes()
    want = jr.Journal.read(path)
    rng = random.Random(21)
    for pos in rng.sample(range(len(good)), 400):
        bit = 1 << rng.randrange(8)
        path.write_bytes(good[:pos] + bytes([good[pos] ^ bit]) + good[pos + 1:])
        try:
            got = jr.Journal.read(path)
        except InputError:
            continue
        # the one flip that is not refused: the last newline, which makes the last record look
        # like a write cut short (set aside, and kept, on resume, as a death mid-write would)
        assert pos == len(good) - 1 and got == want[:-1], f"flip at byte {pos} went unnoticed"
    # a valid-JSON edit of a value (the version a rollback installs)
    path.write_bytes(good.replace(b'"575.57.08"', b'"570.00.01"'))
    with pytest.raises(InputError, match="hash chain") as e:
        jr.Journal.read(path)
    assert e.value.line == 4
    lines = good.splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2] + lines[3:]))          # a line deleted
    with pytest.raises(InputError):
        jr.Journal.read(path)
    path.write_bytes(b"".join(lines[:-1]) + lines[-1].replace(b'"completed"', b'"halted"  '))   # the last line
    with pytest.raises(InputError, match="hash chain") as e:
        jr.Journal.read(path)
    assert e.value.line == len(lines)


def test_a_journal_without_a_chain_is_refused_clearly(tmp_path):
    path = _write(tmp_path, [json.dumps({"seq": 1, "ts": "t", "type": "run_resumed", "pid": 1}) + "\n"])
    with pytest.raises(InputError, match="no hash chain") as e:
        jr.Journal.read(path)
    assert e.value.line == 1


def test_a_record_of_the_wrong_shape_is_refused_with_its_line(tmp_path):
    """A damaged key ("nodf" for "node") with a valid chain: refused where it is read."""
    j = _journal(tmp_path)
    _fill(j)
    j.append("node_state", nodf="gpu-01", to="upgrading", event="passed", **{"from": "cordoned"})
    j.append("stage_done", node="gpu-01", stage="cordon", passed="yes")
    j.close()
    with pytest.raises(InputError, match="node_state record lacks 'node'") as e:
        jr.Journal.read(tmp_path / "journal.jsonl")
    assert e.value.line == 4 and "journal.jsonl:4:" in str(e.value)
    from k3rollout.runlog.records import check

    assert check({"seq": 5, "ts": "t", "type": "stage_done", "node": "a", "stage": "s", "passed": "yes"}) \
        == "stage_done record's 'passed' is a string"
    assert check({"seq": 5, "ts": "t", "type": "batch_done", "batch": True, "status": "passed", "failed": []}) \
        == "batch_done record's 'batch' is a boolean"
    assert check({"seq": 5, "ts": "t", "type": "node_state", "node": "a", "to": "b", "from": "c"}) is None


def test_a_node_record_naming_no_node_is_refused_with_its_line(tmp_path):
    """An empty node name passed as a string, and the fold then failed on it as an internal error."""
    j = _journal(tmp_path)
    _fill(j)
    j.append("node_state", node="", to="upgrading", event="passed", **{"from": "cordoned"})
    j.close()
    with pytest.raises(InputError, match="node_state record's 'node' is empty") as e:
        jr.Journal.read(tmp_path / "journal.jsonl")
    assert e.value.line == 4
    from k3rollout.runlog.records import check

    assert check({"seq": 5, "ts": "t", "type": "stage_started", "node": "", "stage": "cordon"}) \
        == "stage_started record's 'node' is empty"
    assert check({"seq": 5, "ts": "t", "type": "stage_started", "node": "gpu-01", "stage": "cordon"}) is None


def test_record_checks_are_the_same_where_typing_lacks_notrequired():
    """Python 3.10 (requires-python) has no typing.NotRequired, and its typing.TypedDict would
    count every key as required: records.py takes both from typing_extensions there. Run that
    branch here and compare the checks it compiles with this interpreter's."""
    import subprocess
    import sys

    show = "import k3rollout.runlog.records as r; print(repr(r._CHECKS))"
    as_310 = ("import sys, typing, typing_extensions; del typing.NotRequired; "
              "sys.version_info = (3, 10, 13, 'final', 0); " + show)
    here = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, check=True).stdout
    old = subprocess.run([sys.executable, "-c", as_310], capture_output=True, text=True, check=True).stdout
    assert old == here and "'run_started'" in here
    from k3rollout.runlog.records import _CHECKS

    required, optional = _CHECKS["run_started"]
    assert [k for k, _ in required] == ["plan", "run_id"] and "plan_sha256" in dict(optional)


def test_a_second_writer_is_refused_before_it_forks_the_hash_chain(tmp_path):
    """Two processes appending to one journal (an `observe` pass beside a `rollback` of the
    same run) would write two records with one seq: the one that is late is refused."""
    path = tmp_path / "journal.jsonl"
    first = jr.Journal(path, lambda: "2026-12-03T00:00:00+00:00")
    first.append("run_resumed", pid=1)
    second = jr.Journal(path, lambda: "2026-12-03T00:00:01+00:00")    # opened at record 1
    second.append("run_resumed", pid=2)                                # the other writer goes on
    with pytest.raises(jr.JournalWriteError, match="another k3rollout process"):
        first.append("run_resumed", pid=1)
    with pytest.raises(jr.JournalWriteError):                          # and takes no record after
        first.append("run_resumed", pid=1)
    first.close()
    second.close()
    assert [r["pid"] for r in jr.Journal.read(path)] == [1, 2]         # the chain is whole
