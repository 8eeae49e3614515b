"""Fixtures and hooks only: clusters are built from inventories (tests/data or written per
test), faults from host vars, exactly as users write them; every test uses the one
simulated host model. What tests share that is not a fixture (paths, writing inventories
and playbooks, running the CLI, reading a run back) is the ``support`` package beside this
file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CI_NO_SKIP = ("skipped under CI=true: the suite's rule is that nothing is skipped for a missing "
              "dependency there (a quiet skip hides exactly the install step a fresh machine lacks)")


def _ci() -> bool:
    return os.environ.get("CI") == "true"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skip (importorskip, skipif, pytest.skip) is a failure."""
    outcome = yield
    rep = outcome.get_result()
    if _ci() and rep.skipped and not hasattr(rep, "wasxfail"):
        rep.outcome = "failed"
        rep.longrepr = f"{CI_NO_SKIP}\n{rep.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same for a whole module skipped at import (a module-level importorskip)."""
    outcome = yield
    rep = outcome.get_result()
    if _ci() and rep.skipped:
        rep.outcome = "failed"
        rep.longrepr = f"{CI_NO_SKIP}\n{rep.longrepr}"


E2E_DIR = Path(__file__).resolve().parent / "e2e"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every test under tests/e2e/ is marked ``e2e`` (before ``-m`` deselects: tryfirst), so
    ``pytest -m "not e2e"`` is the unit and integration tiers; a test elsewhere that starts
    a real sshd, slurmctld, chromium, ansible-playbook or kubectl carries the mark itself.

    Tests marked ``long`` (the crash matrix, whole rollouts over sshd, the demo in a process
    of its own, the inventory fuzzing through ansible-inventory, the wheel install)
    start first; everything else keeps its collection order. scripts/test.sh hands tests to
    the workers one at a time (``--maxschedchunk 1``), so the long ones start at once on
    different workers, the short ones fill in around them, and no worker is left running a
    long test alone at the end."""
    for item in items:
        if E2E_DIR in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture(autouse=True, scope="session")
def _stop_sim_networks(tmp_path_factory):
    """Simulated-network daemons outlive a killed engine by design (as containers outlive a
    crashed controller); the session stops any a test left behind."""
    yield
    from k3sim.netd import kill_all_under

    kill_all_under(tmp_path_factory.getbasetemp())


@pytest.fixture(autouse=True)
def _stop_let_go_sim_networks():
    """A test ends as the process of a command ends: the simulated clusters whose executors it
    closed in its own process are stopped, as the process's exit stops them
    (k3sim/transport.py), rather than left to the worker's exit."""
    yield
    transport = sys.modules.get("k3sim.transport")
    if transport is not None:
        transport.stop_let_go()


@pytest.fixture(autouse=True)
def _stop_background_runs():
    """A rollout a test started in the background (support/background.py) does not outlive the
    test: one that failed while its run was held at a gate would leave it paused for good."""
    yield
    background = sys.modules.get("support.background")
    if background is not None:
        background.stop_left_behind()


@pytest.fixture(autouse=True)
def _isolated_locks(tmp_path, monkeypatch):
    monkeypatch.setenv("K3ROLLOUT_LOCK_DIR", str(tmp_path / "locks"))


# modules whose every test is about the preflight or runs the driver procedure's default path
PREFLIGHT_MODULES = ("test_preflight", "test_driver_procedure")


@pytest.fixture(autouse=True)
def _preflight_where_the_test_is_about_it(request, monkeypatch):
    """`run` performs the read-only preflight on every node before any change. A test that
    is not about it starts its in-process runs as an operator opting out would, with
    `--no-preflight` (each such run's journal and report say so); tests marked `preflight`,
    the modules in PREFLIGHT_MODULES and runs in a subprocess (the crash matrix, the
    demo's progress, a wheel-installed demo) keep the default."""
    if request.node.get_closest_marker("preflight") or request.module.__name__.rpartition(".")[2] in PREFLIGHT_MODULES:
        return
    from k3rollout import cli as k3cli

    real = k3cli._start_run

    def start_run(playbook_path, inventory_path, run_dir, args, clock):
        if getattr(args, "preflight", None) is None and not getattr(args, "skip_node", None):
            args.no_preflight = True
        return real(playbook_path, inventory_path, run_dir, args, clock)

    monkeypatch.setattr(k3cli, "_start_run", start_run)


@pytest.fixture
def sshd_cluster(tmp_path_factory):
    """Factory: ``with sshd_cluster({"gpu-01": {...}}) as c`` starts real sshd hosts on loopback.

    Under CI=true a missing sshd fails the test: a quiet skip would hide the install step.
    """
    from support.sshd_hosts import SSHDCluster, sshd_available

    if not sshd_available():
        if os.environ.get("CI") == "true":
            pytest.fail("sshd/ssh-keygen not installed: scripts/test.sh installs openssh-server")
        pytest.skip("sshd not installed (scripts/test.sh installs openssh-server)")
    if os.geteuid() != 0:
        pytest.skip("sshd test hosts need root (sshd's privilege separation)")

    import shutil
    import tempfile

    made: list[Path] = []

    def make(hosts: dict[str, dict], bastion: bool = False) -> SSHDCluster:
        # outside pytest's 0700 tmp tree, so sshd's unprivileged children can read it
        base = Path(tempfile.mkdtemp(prefix="k3sshd-"))
        made.append(base)
        return SSHDCluster(base, hosts, bastion=bastion)

    yield make
    for base in made:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def slurm_cluster(monkeypatch):
    """Factory: ``slurm_cluster(["gpu-01", ...])`` starts a real Slurm controller (munged,
    slurmctld, one ``slurmd -N`` per node) on loopback and points ``SLURM_CONF`` at it, so
    the controller's ``scontrol`` (and the test's ``sbatch``) talk to it. Stopped by pid at
    teardown. Under CI=true missing packages fail the test (scripts/test.sh installs them)."""
    import shutil
    import tempfile

    from support.slurm_cluster import SlurmCluster, usable

    why = usable()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no real Slurm controller: {why}")
        pytest.skip(f"no real Slurm controller: {why}")
    started: list[SlurmCluster] = []

    def make(nodes: list[str]) -> SlurmCluster:
        # a short path: the munge socket's path must fit a sockaddr_un
        c = SlurmCluster(Path(tempfile.mkdtemp(prefix="k3slurm-")), nodes)
        started.append(c)
        c.start()
        monkeypatch.setenv("SLURM_CONF", str(c.conf))
        return c

    yield make
    for c in started:
        c.stop()
        shutil.rmtree(c.root, ignore_errors=True)
