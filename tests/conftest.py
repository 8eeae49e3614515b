"""Fixtures: clusters are built from inventories (tests/data or written per test), faults
from host vars, exactly as users write them; every test uses the one simulated host model."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
PLAYBOOK = ROOT / "playbooks" / "k3-driver-rollout.yml"
SIM_INVENTORY = ROOT / "inventories" / "sim" / "hosts.yml"


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


@pytest.fixture(autouse=True, scope="session")
def _stop_sim_networks(tmp_path_factory):
    """Simulated-network daemons outlive a killed engine by design (as containers outlive a
    crashed controller); the session stops any a test left behind."""
    yield
    from k3rollout.sim.netd import kill_all_under

    kill_all_under(tmp_path_factory.getbasetemp())


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
    if request.node.get_closest_marker("preflight") or request.module.__name__ in PREFLIGHT_MODULES:
        return
    from k3rollout import cli as k3cli

    real = k3cli._start_run

    def start_run(playbook_path, inventory_path, run_dir, args, clock):
        if getattr(args, "preflight", None) is None and not getattr(args, "skip_node", None):
            args.no_preflight = True
        return real(playbook_path, inventory_path, run_dir, args, clock)

    monkeypatch.setattr(k3cli, "_start_run", start_run)


def write_inventory(path: Path, hosts: dict[str, dict], group_vars: dict | None = None) -> Path:
    """An Ansible YAML inventory with every host in group gpu_nodes."""
    path.mkdir(parents=True, exist_ok=True)
    inv = {"all": {"vars": {"ansible_connection": "k3sim", "scheduler": "kubernetes", **(group_vars or {})},
                   "children": {"gpu_nodes": {"hosts": {h: (v or None) for h, v in hosts.items()}}}}}
    f = path / "hosts.yml"
    f.write_text(yaml.safe_dump(inv, sort_keys=False))
    return f


def write_playbook(path: Path, reboot_timeout: str | int | None = None, reboot_grace: str | int | None = None,
                   stage_with: dict[str, dict] | None = None, stage_set: dict[str, dict] | None = None,
                   **play_overrides) -> Path:
    """The shipped playbook with some play keys replaced (serial, max_fail_percentage ...)
    and, per stage kind, some ``with:`` parameters (``stage_with={"features": {...}}``)."""
    data = yaml.safe_load(PLAYBOOK.read_text())
    play = data[0]
    if "profile" not in play_overrides:
        # The shipped play plans Kimi K3 in replicas (`profile: kimi-k3`, serial [1, 2, 4] over the
        # default cluster's 12 replicas). A test plans in nodes unless it asks for a profile
        # (profile="kimi-k3"): the node-level play, a canary, then 2, then a quarter of the nodes.
        play.pop("profile", None)
        play["serial"] = [1, 2, "25%"]
    # a shorter load ladder than the shipped one keeps rollouts in tests quick; the shipped
    # ladder runs in the demo test and tests/test_vllm_api.py sets its own
    next(s for s in play["stages"] if s["stage"] == "features")["with"].update(
        {"context_tokens": 4096, "concurrency": [1, 4]})
    for kind, keys in (stage_set or {}).items():
        next(s for s in play["stages"] if s["stage"] == kind).update(keys)
    for kind, params in (stage_with or {}).items():
        next(s for s in play["stages"] if s["stage"] == kind).setdefault("with", {}).update(params)
    upgrade = next(s for s in play["stages"] if s["stage"] == "driver_upgrade")
    # the vendor task files stay where the shipped playbook keeps them
    upgrade["with"]["tasks"] = {k: str(PLAYBOOK.parent / v) for k, v in upgrade["with"]["tasks"].items()}
    if reboot_timeout is not None:
        upgrade["with"]["reboot_timeout"] = reboot_timeout
    if reboot_grace is not None:
        upgrade["with"]["reboot_grace"] = reboot_grace
    for k, v in play_overrides.items():
        if k == "vars":
            play["vars"].update(v)
        else:
            play[k] = v
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cli(*args: str, env: dict | None = None, check: bool = False,
        fault: tuple[str, int] | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess (needed for SIGKILL tests); ``fault=(MODE, N)``
    injects a fault at journal record N (tests/faultinject.py: KILL, TEAR, BEFORE, SHORT)."""
    e = {**os.environ, **(env or {})}
    head = [str(Path(__file__).resolve().parent / "faultinject.py"), fault[0], str(fault[1])] if fault else \
        ["-m", "k3rollout"]
    p = subprocess.run([sys.executable, *head, *args], capture_output=True, text=True, env=e,
                       cwd=str(ROOT), timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"k3rollout {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def result(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def journal(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]


def journal_so_far(run_dir: Path) -> list[dict]:
    """The whole records of a journal a running process is still appending to: a last line
    without its newline is a record being written, not yet one to read."""
    text = (run_dir / "journal.jsonl").read_text()
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def assert_reports_match_journal(run_dir: Path) -> None:
    """The reports a run wrote at its end (from the engine's view, folded record by record
    as they were appended) are exactly what its journal on disk renders."""
    from k3rollout.report import render

    for name, text in render.outputs(render.model(run_dir)).items():
        assert (run_dir / name).read_text(encoding="utf-8") == text, f"{run_dir / name} differs from its journal"


def sim_state(run_dir: Path, host: str) -> dict:
    return json.loads((run_dir / "sim-hosts" / host / "state.json").read_text())


def ansible_tool(name: str) -> str:
    """An ansible-core program, found as k3rollout finds it (beside the interpreter, then
    PATH); missing fails under CI=true (scripts/test.sh installs it), else skips."""
    from k3rollout.toolpaths import find_tool

    found = find_tool(name)
    if not found:
        if _ci():
            pytest.fail(f"{name} missing: scripts/test.sh installs ansible-core")
        pytest.skip("ansible-core not installed")
    return found


def commands(run_dir: Path, host: str) -> list[str]:
    from k3rollout.sim.state import executed

    return executed(run_dir / "sim-hosts" / host)


def api_changes(run_dir: Path, host: str) -> list[str]:
    """The changes the simulated Kubernetes API server was asked for on ``host`` (its node
    and the pods on it), in order: ``PATCH nodes/gpu-01 {...}``, ``POST .../eviction``."""
    from k3rollout.sim.kubeapi import audited

    return audited(run_dir / "sim-hosts" / host)


def host_timeline(run_dir: Path, host: str) -> list[str]:
    """The host's own commands and the changes the Kubernetes API was asked for on it, in
    the order they happened (both logs carry a timestamp)."""
    lines = []
    for name in ("commands.log", "kube-audit.log"):
        f = run_dir / "sim-hosts" / host / name
        if f.exists():
            for ln in f.read_text().splitlines():
                ts, _, cmd = ln.partition(" ")
                if re.fullmatch(r"\d+\.\d+", ts):        # (a command's quoted newline continues a line)
                    lines.append((float(ts), cmd))
    return [c for _, c in sorted(lines, key=lambda x: x[0])]


@pytest.fixture
def sshd_cluster(tmp_path_factory):
    """Factory: ``with sshd_cluster({"gpu-01": {...}}) as c`` starts real sshd hosts on loopback.

    Under CI=true a missing sshd fails the test: a quiet skip would hide the install step.
    """
    from sshd_hosts import SSHDCluster, sshd_available

    if not sshd_available():
        if os.environ.get("CI") == "true":
            pytest.fail("sshd/ssh-keygen not installed: scripts/test.sh installs openssh-server")
        pytest.skip("sshd not installed (scripts/test.sh installs openssh-server)")
    if os.geteuid() != 0:
        pytest.skip("sshd test hosts need root (sshd's privilege separation)")

    def make(hosts: dict[str, dict]) -> SSHDCluster:
        import tempfile

        # outside pytest's 0700 tmp tree, so sshd's unprivileged children can read it
        base = Path(tempfile.mkdtemp(prefix="k3sshd-"))
        return SSHDCluster(base, hosts)

    return make


@pytest.fixture
def slurm_cluster(monkeypatch):
    """Factory: ``slurm_cluster(["gpu-01", ...])`` starts a real Slurm controller (munged,
    slurmctld, one ``slurmd -N`` per node) on loopback and points ``SLURM_CONF`` at it, so
    the controller's ``scontrol`` (and the test's ``sbatch``) talk to it. Stopped by pid at
    teardown. Under CI=true missing packages fail the test (scripts/test.sh installs them)."""
    import shutil
    import tempfile

    from slurm_cluster import SlurmCluster, usable

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
