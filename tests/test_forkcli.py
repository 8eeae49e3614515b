"""The kill-and-resume tests' fork server (tests/support/forkcli.py) gives what ``subprocess.run`` gives:
the same exit status (a signal as its negative number), output, environment and cwd."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support import ROOT
from support.forkcli import ForkServer


@pytest.fixture(scope="module")
def server():
    s = ForkServer()
    yield s
    s.close()


def test_the_cli_forked_answers_as_the_cli_started(server, tmp_path):
    env = dict(os.environ)
    bad = tmp_path / "pb.yml"
    bad.write_text("- hosts: [\n")
    for argv in (["-m", "k3rollout", "--help"], ["-m", "k3rollout", "validate", str(bad), "-i", str(bad)]):
        got = server.run(argv, env, str(ROOT), timeout=60)
        want = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
        assert (got.returncode, got.stdout, got.stderr) == (want.returncode, want.stdout, want.stderr)
    assert got.returncode == 2 and str(bad) in got.stderr


def test_a_child_killed_by_a_signal_has_its_own_environment_cwd_and_argv(server, tmp_path):
    script = tmp_path / "die.py"
    script.write_text("import os, signal, sys\n"
                      "print(os.environ['K3ROLLOUT_X'], os.getcwd(), sys.argv[1:], os.getppid() != 1, flush=True)\n"
                      "sys.stderr.write('going\\n')\n"
                      "os.kill(os.getpid(), signal.SIGKILL)\n")
    env = {**os.environ, "K3ROLLOUT_X": "set for this child"}
    assert server.usable(env)
    got = server.run([str(script), "a", "b"], env, str(tmp_path), timeout=60)
    assert got.returncode == -9
    assert got.stdout == f"set for this child {tmp_path} ['a', 'b'] True\n" and got.stderr == "going\n"


def test_an_environment_the_preloaded_libraries_could_read_is_not_forked(server):
    assert not server.usable({**os.environ, "KUBECONFIG": "/elsewhere"})
    assert not server.usable({k: v for k, v in os.environ.items() if k != "PATH"})
