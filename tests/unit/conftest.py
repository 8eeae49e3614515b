"""Unit-test fixtures: a strict fake executor, and single stages driven through it.

``fake_executor`` implements ``transport.base.Executor`` (plus ``run_controller``, which
the step runner uses for ``on="controller"``) from a script the test writes: each
expected command is an argv pattern and the answer it gets. A command nobody scripted
fails the test at once (``UnscriptedCommand``, which no stage or step runner catches);
a scripted command that was never sent fails it at teardown. Commands must arrive in
the order scripted, so the script is also the assertion of the command sequence.
Nothing here touches the simulated cluster.

``stage_harness`` builds what a stage runs against with the project's own
constructors: the shipped playbook (``load_playbook``), an inventory file
(``load_inventory``), a ``Journal`` and an ``EvidenceStore`` in a temporary run
directory, and an ``Engine`` whose ``ctx()`` is the stage's ``NodeCtx``. Nothing is run
beyond the one stage the test calls.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from k3rollout.errors import TransportError
from k3rollout.transport.base import CommandResult

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "playbooks" / "k3-driver-rollout.yml"

# what bash answers for a program that is not installed (paramiko's exec_command and
# ansible run the argv through the remote user's shell)
NOT_FOUND = "bash: line 1: {prog}: command not found\n"

Element = str | re.Pattern[str]


class UnscriptedCommand(AssertionError):
    """A command the test did not script (or one sent out of order)."""


@dataclass
class Expected:
    host: str | None              # None: any host; "controller" for run_controller
    argv: tuple[Element, ...] | None   # element-wise: a string matches exactly, a pattern fully; None: any argv
    rc: int = 0
    stdout: str = ""
    stderr: str = ""
    raises: TransportError | None = None
    stdin: bytes | None = None    # when set, the stdin the command must be given

    def matches(self, host: str, argv: list[str]) -> bool:
        if self.host is not None and self.host != host:
            return False
        if self.argv is None:
            return True
        if len(self.argv) != len(argv):
            return False
        return all(a == b if isinstance(a, str) else a.fullmatch(b) is not None for a, b in zip(self.argv, argv, strict=True))

    def describe(self) -> str:
        shown = "<any argv>" if self.argv is None else \
            " ".join(a if isinstance(a, str) else f"/{a.pattern}/" for a in self.argv)
        return f"{self.host or '<any host>'}: {shown}"


@dataclass
class Call:
    host: str
    argv: list[str]
    stdin: bytes | None
    timeout: float


@dataclass
class FakeExecutor:
    """The strict scripted executor (see the module docstring)."""

    kind: str = "fake"
    addresses: dict[str, str] = field(default_factory=dict)
    script: list[Expected] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    unscripted: list[str] = field(default_factory=list)
    waits: list[tuple[str, float]] = field(default_factory=list)
    wait_answers: list[float | TransportError] = field(default_factory=list)
    closed: bool = False

    # ------------------------------------------------------------ scripting

    def expect(self, argv: Iterable[Element] | None, *, host: str | None = None, rc: int = 0, stdout: str = "",
               stderr: str = "", raises: TransportError | None = None, stdin: bytes | None = None) -> Expected:
        e = Expected(host, None if argv is None else tuple(argv), rc, stdout, stderr, raises, stdin)
        self.script.append(e)
        return e

    def missing(self, argv: Iterable[Element], *, host: str | None = None) -> Expected:
        """The program is not installed: the shell's rc 127 and its message."""
        argv = tuple(argv)
        prog = argv[0] if isinstance(argv[0], str) else "program"
        return self.expect(argv, host=host, rc=127, stderr=NOT_FOUND.format(prog=prog))

    def expect_wait(self, answer: float | TransportError = 1.0) -> None:
        """One ``wait_for_host`` call: returns the seconds waited, or raises the error."""
        self.wait_answers.append(answer)

    def sent(self) -> list[list[str]]:
        return [c.argv for c in self.calls]

    # ------------------------------------------------------------ the Executor interface

    def _answer(self, host: str, argv: list[str], stdin: bytes | None, timeout: float) -> CommandResult:
        argv = list(argv)
        self.calls.append(Call(host, argv, stdin, timeout))
        if not self.script or not self.script[0].matches(host, argv):
            nxt = self.script[0].describe() if self.script else "nothing (the script is used up)"
            msg = f"unscripted command on {host}: {shlex.join(argv)}\n  the script expected next: {nxt}"
            self.unscripted.append(msg)
            raise UnscriptedCommand(msg)
        e = self.script.pop(0)
        if e.stdin is not None and e.stdin != stdin:
            msg = f"{host}: {shlex.join(argv)} was given stdin {stdin!r}, the script expected {e.stdin!r}"
            self.unscripted.append(msg)
            raise UnscriptedCommand(msg)
        if e.raises is not None:
            raise e.raises
        return CommandResult(host, tuple(argv), e.rc, e.stdout, e.stderr, 0.001)

    def run(self, host: str, argv: list[str], *, stdin: bytes | None = None, timeout: float = 600.0) -> CommandResult:
        return self._answer(host, argv, stdin, timeout)

    def run_controller(self, argv: list[str], *, stdin: bytes | None = None,
                       timeout: float = 600.0) -> CommandResult:
        return self._answer("controller", argv, stdin, timeout)

    def wait_for_host(self, host: str, timeout: float) -> float:
        self.waits.append((host, timeout))
        if not self.wait_answers:
            msg = f"unscripted wait_for_host({host!r}, {timeout})"
            self.unscripted.append(msg)
            raise UnscriptedCommand(msg)
        answer = self.wait_answers.pop(0)
        if isinstance(answer, TransportError):
            raise answer
        return answer

    def api_host(self, host: str) -> str:
        if host not in self.addresses:
            msg = f"unscripted api_host({host!r})"
            self.unscripted.append(msg)
            raise UnscriptedCommand(msg)
        return self.addresses[host]

    def close(self) -> None:
        self.closed = True

    # ------------------------------------------------------------ the verdict

    def problems(self) -> list[str]:
        out = list(self.unscripted)
        out += [f"scripted but never sent: {e.describe()}" for e in self.script]
        out += [f"scripted wait_for_host never called (answer {a!r})" for a in self.wait_answers]
        return out


@pytest.fixture
def fake_executor():
    """A fresh ``FakeExecutor``; the test fails if any command went unscripted or any
    scripted command (or wait) was never used."""
    fake = FakeExecutor()
    yield fake
    problems = fake.problems()
    if problems:
        pytest.fail("strict fake executor:\n  " + "\n  ".join(problems), pytrace=False)


@pytest.fixture
def fake_executor_class():
    """The class itself, for tests of the fake's own strictness (which must not fail
    through the fixture's teardown)."""
    return FakeExecutor


@dataclass
class Harness:
    engine: Any
    run_dir: Path
    executor: FakeExecutor

    def ctx(self, kind: str, node: str = "gpu-01", *, facts: dict | None = None, baseline: dict | None = None):
        """The ``NodeCtx`` the engine would give stage ``kind`` on ``node`` (parameters
        rendered as the engine renders them), with the given facts and baseline."""
        stage = self.engine.stages[self.engine.kinds.index(kind)]
        c = self.engine.ctx(node, stage, self.engine.folder(stage), self.engine.render_params(stage, node))
        c.facts.update(facts or {})
        c.baseline.update(baseline or {})
        return c

    def run_stage(self, kind: str, node: str = "gpu-01"):
        """The stage as the engine runs it (``NodeWalker.run_stage``): its ``pre`` assertions,
        its parameters rendered, and a ``StepFailed`` or ``ParseError`` turned into a failed
        outcome. Facts come from the journal only, so this suits the first stage."""
        return self.engine.node_walker.run_stage(node, self.engine.stages[self.engine.kinds.index(kind)])

    def journal(self) -> list[dict]:
        from k3rollout.runlog.journal import Journal

        return Journal.read(self.run_dir / "journal.jsonl")

    def steps(self, type_: str = "step_done") -> list[dict]:
        return [r for r in self.journal() if r["type"] == type_]

    def evidence(self, rel: str) -> str:
        return self.engine.evidence.read(rel)


@pytest.fixture
def stage_harness(tmp_path, fake_executor):
    """Factory: ``stage_harness(scheduler="kubernetes", hosts={"gpu-01": {...}})`` -> a
    ``Harness`` over a real Engine (shipped playbook, the inventory written here, a real
    journal and evidence store under ``tmp_path/run``) whose executor is the fake."""
    from k3rollout.engine.clock import Clock
    from k3rollout.engine.runner import Engine
    from k3rollout.evidence.store import EvidenceStore
    from k3rollout.model import load_inventory, load_playbook
    from k3rollout.runlog.journal import Journal

    made: list[Harness] = []

    def make(*, scheduler: str = "kubernetes", hosts: dict[str, dict] | None = None,
             group_vars: dict | None = None) -> Harness:
        hosts = hosts or {"gpu-01": {}}
        inv_dir = tmp_path / "inventory"
        inv_dir.mkdir(exist_ok=True)
        inv = {"all": {"vars": {"ansible_connection": "ssh", "scheduler": scheduler, **(group_vars or {})},
                       "children": {"gpu_nodes": {"hosts": {h: (v or None) for h, v in hosts.items()}}}}}
        (inv_dir / "hosts.yml").write_text(yaml.safe_dump(inv, sort_keys=False))
        run_dir = tmp_path / "run"
        run_dir.mkdir(exist_ok=True)
        clock = Clock()
        playbook = load_playbook(PLAYBOOK)
        inventory = load_inventory(inv_dir / "hosts.yml", playbook_dir=str(PLAYBOOK.parent), resolver="native")
        engine = Engine(playbook=playbook, inventory=inventory, executor=fake_executor,
                        journal=Journal(run_dir / "journal.jsonl", clock.iso),
                        evidence=EvidenceStore(run_dir / "evidence"), clock=clock, run_id="unit-run")
        h = Harness(engine, run_dir, fake_executor)
        made.append(h)
        return h

    yield make
    for h in made:
        h.engine.journal.close()
        h.engine.close()


def _kube_api(tmp_path, host_vars: dict):
    from support import DOCKER_HOST

    from k3sim.dispatch import init_cluster
    from k3sim.kubeapi import KubeApiServer

    root = tmp_path / "cluster"
    # a Docker host (cri-dockerd) whose serving pod no owner recreates, as the stage tests
    # that use it script a Docker host's commands
    init_cluster(root, {"gpu-01": {**DOCKER_HOST, **host_vars}})
    return KubeApiServer(root)


@pytest.fixture
def kube_api(tmp_path):
    """The simulated Kubernetes API server on loopback, node gpu-01 (running a serving pod
    and a DaemonSet pod), and an admin kubeconfig for it: (server, kubeconfig path)."""
    with _kube_api(tmp_path, {}) as srv:
        yield srv, srv.kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kube_api_pdb(tmp_path):
    """As ``kube_api``, with a PodDisruptionBudget that never lets gpu-01's serving pod go."""
    with _kube_api(tmp_path, {"sim_faults": ["pdb_blocks_eviction"]}) as srv:
        yield srv, srv.kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def dead_kubeconfig(tmp_path):
    """A kubeconfig whose API server is a closed port on loopback (discard, 9)."""
    import yaml

    cfg = tmp_path / "dead-kubeconfig"
    cfg.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                                   "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                                   "users": [{"name": "u", "user": {"token": "t"}}],
                                   "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return cfg
