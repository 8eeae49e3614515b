"""What the tests share that is not a fixture: where the repository's files are, writing an
inventory or a playbook the way users write them, running the real CLI, and reading back
what a run left (its result, journal, reports, and each simulated host's command log).

Imported as ``support`` (``pythonpath = ["tests"]`` in pyproject.toml puts ``tests/`` on
``sys.path`` for every test module and xdist worker, whatever the import mode). Fixtures
and hooks live in ``tests/conftest.py``; the real sshd hosts and Slurm controller the
fixtures start are ``support.sshd_hosts`` and ``support.slurm_cluster``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
PLAYBOOK = ROOT / "playbooks" / "k3-driver-rollout.yml"
SIM_INVENTORY = ROOT / "inventories" / "sim" / "hosts.yml"


# A test node's GPUs unless the test names them: 8 x B300 (268 GiB each, as nvidia-smi shows
# the B300 SXM6 AC, k3sim/gpu.py), which hold Kimi K3 on one node (the profile's tp8).
# The simulator's own default, 8 x H200, cannot: vLLM runs out of memory loading K3 there, so a
# test on H200 says so and serves K3 in the profile's two-node replicas.
GPU_VARS = ("k3_gpu_model", "k3_gpu_count", "k3_gpu_mem_gib")
DEFAULT_GPU = {"k3_gpu_model": "NVIDIA B300 SXM6 AC", "k3_gpu_count": 8, "k3_gpu_mem_gib": 268}


def with_default_gpu(hv: dict | None, group_vars: dict | None = None, default_gpu: dict | None = DEFAULT_GPU) -> dict:
    """A host's vars with ``default_gpu`` where neither they nor the group name any GPU var."""
    hv = dict(hv or {})
    if not default_gpu or any(k in hv or k in (group_vars or {}) for k in GPU_VARS):
        return hv
    return {**default_gpu, **hv}


def write_inventory(path: Path, hosts: dict[str, dict], group_vars: dict | None = None,
                    default_gpu: dict | None = DEFAULT_GPU) -> Path:
    """An Ansible YAML inventory with every host in group gpu_nodes, on ``default_gpu`` unless
    a host or the group names its GPUs (None: the inventory names no GPUs)."""
    path.mkdir(parents=True, exist_ok=True)
    inv = {"all": {"vars": {"ansible_connection": "k3sim", "scheduler": "kubernetes", **(group_vars or {})},
                   "children": {"gpu_nodes": {"hosts": {h: with_default_gpu(v, group_vars, default_gpu) or None
                                                        for h, v in hosts.items()}}}}}
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
        # the simulated K3 server caches prefixes in the profile's 1,536-token blocks: the
        # prefix proof is sized from them, as the profile would size it
        next(s for s in play["stages"] if s["stage"] == "features")["with"]["prefix_block_tokens"] = 1536
    # a shorter load ladder than the shipped one keeps rollouts in tests quick; the shipped
    # ladder runs in the demo test and tests/e2e/test_vllm_api.py sets its own
    next(s for s in play["stages"] if s["stage"] == "features")["with"].update(
        {"context_tokens": 4096, "concurrency": [1, 4]})
    # the sim's owners are back within seconds: a workload that never comes back (or never
    # answers its probe again) fails a test in ten minutes, not after the recipe's hour
    uncordon_stage = next(s for s in play["stages"] if s["stage"] == "uncordon")
    uncordon_stage.setdefault("with", {}).setdefault("serving_ready_timeout", "10m")
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


_FORK_SERVER = None


_FORK_SERVER_LOCK = threading.Lock()


def _fork_server():
    """This worker's CLI fork server (support/forkcli.py), started on first use."""
    global _FORK_SERVER
    with _FORK_SERVER_LOCK:        # a test may start the CLI from several threads at once
        if _FORK_SERVER is None:
            import atexit

            from support.forkcli import ForkServer

            _FORK_SERVER = ForkServer()
            atexit.register(_FORK_SERVER.close)
    return _FORK_SERVER


def cli(*args: str, env: dict | None = None, check: bool = False,
        fault: tuple[str, int] | None = None, fork: bool = False) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess (needed for SIGKILL tests); ``fault=(MODE, N)``
    injects a fault at journal record N (tests/support/faultinject.py: KILL, TEAR, BEFORE, SHORT).
    With ``fork`` the process is forked from this worker's fork server, which has the CLI's
    third-party libraries imported already (support/forkcli.py): the same process, a second
    less of CPU before it starts."""
    e = {**os.environ, **(env or {})}
    head = [str(Path(__file__).resolve().parent / "faultinject.py"), fault[0], str(fault[1])] if fault else \
        ["-m", "k3rollout"]
    # K3_TEST_NO_FORK=1 starts them plainly: how the server's saving was measured (bench/README.md)
    if fork and os.environ.get("K3_TEST_NO_FORK") != "1" and _fork_server().usable(e):
        p = _fork_server().run([*head, *args], e, str(ROOT), timeout=300)
    else:
        p = subprocess.run([sys.executable, *head, *args], capture_output=True, text=True, env=e,
                           cwd=str(ROOT), timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"k3rollout {' '.join(args)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def forked_cli(*args: str, **kw) -> subprocess.CompletedProcess:
    """``cli(..., fork=True)``: for the tests that start the CLI many times over (the crash
    matrix and the other kill-and-resume tests)."""
    return cli(*args, fork=True, **kw)


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
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} missing: scripts/test.sh installs ansible-core")
        pytest.skip("ansible-core not installed")
    return found


def commands(run_dir: Path, host: str) -> list[str]:
    from k3sim.state import executed

    return executed(run_dir / "sim-hosts" / host)


# a Docker host in the simulated cluster whatever its scheduler: the tests about the docker
# path say so (under scheduler: kubernetes nodes are containerd nodes run through Pods)
DOCKER_HOST = {"sim_container_runtime": "docker", "k3_workload_backend": "docker"}


def no_docker(run_dir: Path, hosts) -> None:
    """The guard: a containerd node has no docker CLI, and nothing may try it there."""
    tried = {h: [c for c in commands(run_dir, h) if c.split(" ", 1)[0].rsplit("/", 1)[-1] == "docker"]
             for h in hosts}
    assert tried == {h: [] for h in hosts}, f"docker commands reached containerd nodes: {tried}"


def api_changes(run_dir: Path, host: str) -> list[str]:
    """The changes the simulated Kubernetes API server was asked for on ``host`` (its node
    and the pods on it), in order: ``PATCH nodes/gpu-01 {...}``, ``POST .../eviction``."""
    from k3sim.kubeapi import audited

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


def race_for_lock(*makers: Callable[[], Any], timeout: float = 120.0) -> tuple[Any, str]:
    """Runs racing for one cluster lock: each maker builds its run's lock (its own executor
    or client, as another controller would), then a barrier lets every lock call
    ``acquire()`` at once, each in a thread of its own, and exactly one must win. Returns the
    winner (to check and release) and the refusal (``LockHeld``'s message) of the other. An
    error that is not a refusal fails the test with its traceback."""
    from concurrent.futures import ThreadPoolExecutor

    from k3rollout.errors import LockHeld

    locks = [make() for make in makers]
    barrier = threading.Barrier(len(locks), timeout=timeout)

    def go(lock: Any) -> tuple[Any, str | None]:
        barrier.wait()
        try:
            lock.acquire()
        except LockHeld as exc:
            return None, str(exc)
        return lock, None

    with ThreadPoolExecutor(max_workers=len(locks)) as pool:
        outcomes = [f.result() for f in [pool.submit(go, lock) for lock in locks]]
    won = [lock for lock, _ in outcomes if lock is not None]
    refused = [why for _, why in outcomes if why is not None]
    assert len(won) == 1 and len(refused) == len(locks) - 1, (won, refused)
    return won[0], refused[0]


def kubectl_exe() -> str:
    """The real kubectl (scripts/test.sh installs kubernetes-client where the image lacks it):
    missing, the test fails under CI=true and is skipped elsewhere."""
    import shutil

    import pytest

    exe = shutil.which("kubectl")
    if not exe:
        if os.environ.get("CI") == "true":
            pytest.fail("kubectl missing: scripts/test.sh installs kubernetes-client where the image lacks it")
        pytest.skip("kubectl not installed")
    return exe
