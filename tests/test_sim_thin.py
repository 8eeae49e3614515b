"""The small command process behind sshd (sim/thin.py): what it prints and exits with is what
the whole simulator prints and exits with, through the daemon when one runs and without it
when none does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k3sim import netd, thin
from k3sim.state import executed, init_host, load, transaction

WHOLE = [sys.executable, "-c", "import sys; from k3sim.__main__ import main; sys.exit(main(sys.argv[1:]))"]


@pytest.fixture
def host(tmp_path):
    root = tmp_path / "states"
    state = init_host(root / "gpu-01", "gpu-01", {})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # and beside them the same programs with no simulator to fall back on: they answer only
    # through the daemon
    only = tmp_path / "daemon-only"
    only.mkdir()
    for cmd in ("nvidia-smi", "cat", "tee", "mkdir", "sudo", "no-such-tool"):
        thin.write_program(str(bin_dir / cmd), sys.executable)
        thin.write_program(str(only / cmd), sys.executable)
        text = (only / cmd).read_text()
        (only / cmd).write_text(text.replace(f"thin.main({sys.executable!r})", "thin.main('/nonexistent/python3')"))
        assert (only / cmd).read_text() != text
    netd.ensure(root)
    yield root, state, bin_dir
    netd.shutdown(root)


def run(argv: list[str], state: Path, stdin: bytes | None = None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, input=stdin, capture_output=True, env={**os.environ, "K3SIM_STATE": str(state), **env},
                          timeout=60)


def both(bin_dir: Path, state: Path, argv: list[str], stdin: bytes | None = None):
    args = [os.fsencode(a) for a in argv[1:]]
    small = run([str(bin_dir / argv[0]), *args], state, stdin)
    whole = run([*WHOLE, str(bin_dir / argv[0]), *args], state, stdin)
    return small, whole


def test_the_small_process_answers_as_the_whole_simulator(host):
    root, state, bin_dir = host
    for argv in (["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"],
                 ["nvidia-smi", "--bogus-flag"],
                 ["cat", "/proc/driver/nvidia/version"],
                 ["cat", "/no/such/file"],
                 ["no-such-tool", "x"],
                 ["cat", "/var/tmp/caf\udcff"]):       # an argument that is not UTF-8
        small, whole = both(bin_dir, state, argv)
        assert (small.returncode, small.stdout, small.stderr) == (whole.returncode, whole.stdout, whole.stderr), argv
    assert both(bin_dir, state, ["nvidia-smi", "--bogus-flag"])[0].returncode != 0
    # through the daemon: the program without a simulator to fall back on answers the same
    small = run([str(bin_dir.parent / "daemon-only" / "nvidia-smi"), "-L"], state)
    assert small.returncode == 0 and small.stdout.count(b"GPU ") == 8
    odd = both(bin_dir, state, ["cat", "/var/tmp/caf\udcff"])[1]
    small = run([str(bin_dir.parent / "daemon-only" / "cat"), b"/var/tmp/caf\xff"], state)
    assert (small.returncode, small.stdout, small.stderr) == (odd.returncode, odd.stdout, odd.stderr) \
        and small.returncode == 1


def test_stdin_reaches_the_command_and_a_sudo_password_is_checked(host):
    root, state, bin_dir = host
    p = run([str(bin_dir / "tee"), "/var/tmp/k3-note"], state, b"line one\n")
    assert p.returncode == 0 and p.stdout == b"line one\n"
    assert run([str(bin_dir / "cat"), "/var/tmp/k3-note"], state).stdout == b"line one\n"
    with transaction(state) as s:
        s["sudo_password"] = "pw"
    bad = run([str(bin_dir / "sudo"), "-S", "nvidia-smi", "-L"], state, b"wrong\n")
    good = run([str(bin_dir / "sudo"), "-S", "nvidia-smi", "-L"], state, b"pw\n")
    assert bad.returncode == 1 and b"incorrect password" in bad.stderr
    assert good.returncode == 0 and good.stdout.count(b"GPU ") == 8


def test_a_host_that_is_down_exits_255_and_a_machine_file_command_runs_the_machines_program(host, tmp_path):
    root, state, bin_dir = host
    with transaction(state) as s:
        s["down_until"] = 4e9
    small, whole = both(bin_dir, state, ["nvidia-smi", "-L"])
    assert small.returncode == whole.returncode == 255 and small.stderr == whole.stderr
    assert b"Connection refused" in small.stderr
    real = tmp_path / "machine" / "dir"
    assert run([str(bin_dir / "mkdir"), "-p", str(real)], state).returncode == 0 and real.is_dir()
    assert not any("mkdir" in c for c in executed(state))


def test_without_a_daemon_the_whole_simulator_runs_the_command(host):
    root, state, bin_dir = host
    # asked until it is gone: on a loaded machine the daemon may not answer the first request
    # within its timeout (the deadline only guards against a hang)
    deadline = time.monotonic() + 120
    while netd.running(root):
        assert time.monotonic() < deadline, "the simulated network daemon never stopped"
        netd.shutdown(root)
        time.sleep(0.05)
    assert run([str(bin_dir.parent / "daemon-only" / "nvidia-smi"), "-L"], state).returncode != 0
    p = run([str(bin_dir / "nvidia-smi"), "--query-gpu=driver_version", "--format=csv,noheader"], state)
    assert p.returncode == 0 and p.stdout.decode().splitlines() == [load(state)["loaded_driver"]] * 8


def test_the_socket_names_are_the_daemons(tmp_path):
    root = tmp_path / "states"
    root.mkdir()
    assert netd.command_name(root) == thin.command_name(str(root)) == thin.control_name(str(root)) + b"-run"
    link = tmp_path / "link"
    link.symlink_to(root)
    assert thin.command_name(str(link)) == thin.command_name(str(root))
