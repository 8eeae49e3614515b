"""How a stage's commands run: journaled before and after, output kept as evidence.

``StepRunner`` is the engine's implementation of ``stages.base.StageContext``: the object a
stage gets as ``ctx.runner``, built from what it needs (the recorder's ``record`` and view,
the executor, the evidence store, the clock, the scheduler, the redactor). A
``once`` step (cordon, driver install, reboot, uncordon, restore) is never run twice: a
completed one is replayed from the journal, an interrupted one is settled by its probe.
A dropped connection during a ``once`` step is settled the same way, then retried once
if it did not take effect; during a read-only step, the command is run again with backoff
within the stage's timeout. Transport errors become ``StepFailed`` with the host named.
"""

from __future__ import annotations

import hashlib
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from k3rollout import fastjson
from k3rollout.engine.clock import Clock
from k3rollout.engine.pool import run_each
from k3rollout.errors import CommandTimeout, ConnectionLost, HostUnreachable, K3RolloutError, StepFailed, TransportError
from k3rollout.evidence.store import EvidenceStore
from k3rollout.runlog.rundir import RunDir
from k3rollout.runlog.view import RunView
from k3rollout.scheduler import Scheduler, k8s_calls, scheduler_for
from k3rollout.scheduler.k8s_api import KubernetesApi, KubernetesError, kubeconfig_for
from k3rollout.stages.base import NodeCtx
from k3rollout.toolpaths import require_tool
from k3rollout.transport import local
from k3rollout.transport.base import CommandResult, Executor

if TYPE_CHECKING:
    from k3rollout.transport.http import ApiClient, HttpResult

EVIDENCE_BODY_MAX = 64 * 1024
# a read-only command whose connection dropped is retried with backoff for this long
# (or the stage's ``timeout``, when the playbook sets one)
READ_RETRY_S = 120.0
READ_RETRY_FIRST_S = 0.2
READ_RETRY_MAX_DELAY_S = 5.0


# Load-ladder streams this process reads at once, over every node of a window. One Python
# process reads a streamed event in about 0.1-0.25 ms of CPU (h11's chunk parsing, the line
# split, the JSON), all under one interpreter lock: 8 nodes each streaming a concurrency-64
# level at the same instant (512 streams) left first tokens waiting in this process, and its
# figures ran 0.2-0.9 s behind the servers' own histograms (issue #35, point 7). A level whose
# streams do not fit waits for a level in flight to end; the wait is before its first request,
# outside its figures, and recorded. A level larger than the budget runs alone.
LADDER_STREAMS_AT_ONCE = 128


class StreamBudget:
    """A counting gate for streams open at once in this process."""

    def __init__(self, limit: int):
        self.limit = limit
        self._open = 0
        self._cond = threading.Condition()

    def acquire(self, n: int) -> float:
        """Wait until ``n`` more streams fit (or none is open); returns the seconds waited."""
        started = time.monotonic()
        with self._cond:
            while self._open and self._open + n > self.limit:
                self._cond.wait()
            self._open += n
        return time.monotonic() - started

    def release(self, n: int) -> None:
        with self._cond:
            self._open -= n
            self._cond.notify_all()


class ReadDropped(StepFailed):
    """A read-only command lost its connection (retried by the step runner)."""


@dataclass
class CallResult:
    """What ``call`` returns: rc 0 with the API's answer, or rc 1 with its refusal."""
    rc: int
    answer: Any
    error: str
    duration_s: float
    replayed: bool = False      # a ``once`` call completed (or settled) before a crash

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def tail(self, n: int = 600) -> str:
        return self.error[-n:]


def _http_evidence(node: str, res: HttpResult, body: Any) -> str:
    """A request and its reply as evidence. A request body over 64 KiB (a long-context
    prompt) is kept as its head, tail, length and sha256, and says so."""
    sent = "" if body is None else fastjson.dumps_pretty(body)
    if len(sent) > EVIDENCE_BODY_MAX:
        digest = hashlib.sha256(sent.encode()).hexdigest()
        half = EVIDENCE_BODY_MAX // 2
        sent = (f"{sent[:half]}\n... [{len(sent) - 2 * half} characters elided from this record; the full request "
                f"body was {len(sent)} characters, sha256 {digest}] ...\n{sent[-half:]}")
    head = (f"> {res.method} {res.url}\n{sent}\n# host={node} status={res.status} elapsed_s={res.elapsed_s:.4f}"
            + (f" ttft_s={res.ttft_s:.4f} ttft_channel={res.ttft_channel}" if res.ttft_s is not None else "")
            + (f" error={res.error}" if res.error else ""))
    if res.events:
        reply = "\n".join("data: " + fastjson.dumps_str(e) for e in res.events) + ("\ndata: [DONE]" if res.done else "")
    else:
        reply = res.text
    return f"{head}\n--- response ---\n{reply}"


class StepRunner:
    """Runs a stage's steps: commands on hosts, API calls, vendor task files, HTTP requests
    to the node's server, each journaled through ``record`` and kept as evidence.

    ``view`` is the run view ``record`` folds into (a ``once`` step reads its earlier
    starts and ends there); ``stage_timeouts`` maps a stage kind to the playbook's
    ``timeout`` for it (a read-only retry stays within it); ``scheduler`` gives a node's
    scheduler from its vars; ``stopping`` is the run's stop flag."""

    def __init__(self, *, record: Callable[..., dict[str, Any]], view: RunView, executor: Executor, evidence: EvidenceStore,
                 redact: Callable[[str], str], inventory: Any, log: Any, clock: Clock | None = None,
                 stopping: threading.Event | None = None, stage_timeouts: dict[str, float | None] | None = None,
                 scheduler: Callable[[dict[str, Any]], Scheduler] = scheduler_for):
        self.record = record
        self.view = view
        self.executor = executor
        self.evidence = evidence
        self.redact = redact
        self.inventory = inventory
        self.log = log
        self.clock = clock if clock is not None else Clock()
        self.stopping = stopping if stopping is not None else threading.Event()
        self.stage_timeouts = dict(stage_timeouts or {})
        self._scheduler_for = scheduler
        self._lock = threading.Lock()
        self._api: ApiClient | None = None
        self._proxy_clients: dict[str, ApiClient] = {}     # per API server: its pod proxy
        self._kube_apis: dict[tuple[str | None, str | None], Any] = {}
        self.streams = StreamBudget(LADDER_STREAMS_AT_ONCE)

    def close(self) -> None:
        """Release the HTTP pool and the Kubernetes API clients."""
        if self._api is not None:
            self._api.close()
        for client in self._proxy_clients.values():
            client.close()
        self._proxy_clients = {}
        self.close_kube()

    def scheduler(self, ctx: NodeCtx) -> Scheduler:
        """The node's scheduler, from its vars (``scheduler: kubernetes|slurm|none``)."""
        return self._scheduler_for(ctx.vars)

    def prior_meta(self, ctx: NodeCtx, name: str) -> dict[str, Any] | None:
        """The meta journaled with an earlier start of this step (before a crash), if any."""
        rec = self.view.steps_started.get((ctx.node, f"{ctx.folder}/{name}"))
        return rec.get("meta") if rec else None

    def step(self, ctx: NodeCtx, name: str, argv: list[str], *, once: bool = False,
             probe: Callable[[NodeCtx, dict[str, Any]], bool] | None = None, stdin: bytes | None = None,
             timeout: float = 600.0, evidence: bool = True, meta: dict[str, Any] | None = None,
             on: str | None = None, _retry: bool = True) -> CommandResult:
        """``on``: where it runs when not on the node itself, ``"controller"`` or an
        inventory host (the scheduler's operations); the journal records it as ``ran_on``."""
        key = f"{ctx.folder}/{name}"
        node = ctx.node
        target = on or node
        shown = [self.redact(a) for a in argv]
        if once and _retry:      # the retry below comes straight from a settle: not probed twice
            earlier = self._replay_or_settle(ctx, name, key, argv, probe)
            if earlier is not None:
                return earlier
        # a read-only command's records need no fsync of their own (see Journal.append);
        # everything before a destructive step is made durable by that step's record
        self.record("step_started", node=node, stage=ctx.stage, step=name, key=key, argv=shown, once=once,
                    durable=once, **({"meta": meta} if meta else {}), **({"ran_on": on} if on else {}))
        try:
            if on == local.HOST:
                # a simulated cluster simulates its controller too; a real one is this machine
                on_controller = getattr(self.executor, "run_controller", None) or local.run
                res = on_controller(argv, stdin=stdin, timeout=timeout)
            else:
                res = self.executor.run(target, argv, stdin=stdin, timeout=timeout)
        except ConnectionLost as exc:
            self.record("step_error", node=node, stage=ctx.stage, step=name, key=key, error="connection_lost",
                        message=self.redact(str(exc)))
            if once and probe and _retry:
                try:
                    self.executor.wait_for_host(target, min(timeout, 300.0))
                    took = probe(ctx, meta or {})
                except TransportError as exc2:
                    raise StepFailed(self.redact(str(exc2))) from None
                self.record("step_settled", node=node, stage=ctx.stage, step=name, key=key, took_effect=took,
                            how="probe after the connection dropped")
                if took:
                    return CommandResult(node, tuple(argv), 0, "", "", 0.0)
                return self.step(ctx, name, argv, once=once, probe=probe, stdin=stdin, timeout=timeout,
                                 evidence=evidence, meta=meta, on=on, _retry=False)
            if not once:
                if _retry:
                    return self._retry_read(ctx, name, argv, exc, stdin=stdin, timeout=timeout, evidence=evidence,
                                            meta=meta, on=on)
                raise ReadDropped(self.redact(str(exc)), self.redact(exc.output_tail)) from None
            raise StepFailed(self.redact(str(exc)), self.redact(exc.output_tail)) from None
        except (HostUnreachable, CommandTimeout, TransportError) as exc:
            self.record("step_error", node=node, stage=ctx.stage, step=name, key=key,
                        error=type(exc).__name__, message=self.redact(str(exc)))
            raise StepFailed(self.redact(str(exc)), self.redact(exc.output_tail)) from None
        ref = None
        if evidence:
            body = (f"$ {shlex.join(shown)}\n# host={target} rc={res.rc} duration_s={res.duration_s:.3f}\n"
                    f"--- stdout ---\n{self.redact(res.stdout)}\n--- stderr ---\n{self.redact(res.stderr)}")
            ref = self.evidence.write(node, ctx.folder, name, body)
        # a destructive step's outcome is committed with the next commit (at the latest the
        # next destructive step's start): were it lost in a power cut, its probe settles the
        # step on resume. Only an outcome nothing could settle is committed at once.
        self.record("step_done", node=node, stage=ctx.stage, step=name, key=key, rc=res.rc, once=once,
                    duration_s=round(res.duration_s, 4), evidence=ref.path if ref else None,
                    sha256=ref.sha256 if ref else None, durable=once and probe is None)
        return res

    def read_retry_budget(self, ctx: NodeCtx, timeout: float) -> float:
        """How long a read-only command may keep being retried: within the stage's
        ``timeout`` when the playbook gives one, else ``READ_RETRY_S``, and never longer
        than the command's own timeout."""
        stage_timeout = self.stage_timeouts.get(ctx.stage)
        return min(timeout, stage_timeout if stage_timeout else READ_RETRY_S)

    def _retry_read(self, ctx: NodeCtx, name: str, argv: list[str], first: ConnectionLost, **kw: Any) -> CommandResult:
        """A read-only command whose connection dropped (sshd killed or restarted, a
        network blip) is run again, with backoff, until its retry budget is spent. Running
        it again changes nothing on the host; a destructive (``once``) command is never
        retried here: it is settled by its probe."""
        budget = self.read_retry_budget(ctx, kw["timeout"])
        deadline = time.monotonic() + budget
        delay = READ_RETRY_FIRST_S
        last: TransportError | StepFailed = first
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self.stopping.is_set():
                tail = last.output_tail if isinstance(last, TransportError) else last.logs
                raise StepFailed(self.redact(f"{last} (a read-only command: retried for its {budget:.0f}s budget)"),
                                 self.redact(tail)) from None
            time.sleep(min(delay, left))
            delay = min(delay * 2, READ_RETRY_MAX_DELAY_S)
            target = kw.get("on") or ctx.node
            try:
                if target != local.HOST:
                    self.executor.wait_for_host(target, max(0.1, deadline - time.monotonic()))
            except TransportError as exc:
                last = exc
                continue
            self.log.info("read_retry", node=ctx.node, step=name)
            try:
                return self.step(ctx, name, argv, _retry=False, **kw)
            except ReadDropped as exc:
                last = exc

    def call(self, ctx: NodeCtx, name: str, what: list[str], fn: Callable[[], Any], *, ran_on: str,
             once: bool = False, probe: Callable[[NodeCtx, dict[str, Any]], bool] | None = None,
             meta: dict[str, Any] | None = None) -> CallResult:
        """A call the controller makes itself (an API request, not a command on a host),
        journaled like a step: ``what`` is what the journal shows (e.g. ``["PATCH",
        "nodes/gpu-01", "spec.unschedulable=true"]``), ``ran_on`` where it went (the API
        server's URL). ``fn()`` returns the answer (JSON-able, kept as evidence) or raises
        ``K3RolloutError`` (the refusal becomes the result: rc 1 and its message). A ``once``
        call is replayed or settled by ``probe`` after a crash, as ``step`` does."""
        key = f"{ctx.folder}/{name}"
        node = ctx.node
        shown = [self.redact(str(a)) for a in what]
        if once:
            earlier = self._replay_or_settle(ctx, name, key, shown, probe)
            if earlier is not None:
                return CallResult(earlier.rc, None, "", 0.0, replayed=True)
        self.record("step_started", node=node, stage=ctx.stage, step=name, key=key, argv=shown, kind="api",
                    once=once, durable=once, ran_on=ran_on, **({"meta": meta} if meta else {}))
        started = time.monotonic()
        try:
            answer, error, rc = fn(), "", 0
        except K3RolloutError as exc:
            # a refusal may carry what was done before it (a drain's evictions and refusals)
            answer, error, rc = getattr(exc, "answer", None), self.redact(str(exc)), 1
        took = time.monotonic() - started
        body = (f"> {shlex.join(shown)}\n# node={node} ran_on={ran_on} rc={rc} duration_s={took:.3f}\n"
                f"--- answer ---\n{self.redact(fastjson.dumps_pretty(answer)) if answer is not None else ''}\n"
                f"--- error ---\n{error}")
        ref = self.evidence.write(node, ctx.folder, name, body)
        self.record("step_done", node=node, stage=ctx.stage, step=name, key=key, kind="api", rc=rc, once=once,
                    ran_on=ran_on, error=error or None, duration_s=round(took, 4), evidence=ref.path,
                    sha256=ref.sha256, durable=once and probe is None)
        return CallResult(rc, answer, error, took)

    def _replay_or_settle(self, ctx: NodeCtx, name: str, key: str, argv: list[str],
                          probe: Callable[[NodeCtx, dict[str, Any]], bool] | None) -> CommandResult | None:
        """For a ``once`` step: its recorded result if it completed before, a settled result
        if it was interrupted but the probe shows it took effect, else None (run it)."""
        node = ctx.node
        done = self.view.steps_done.get((node, key))
        if done is not None:
            return CommandResult(node, tuple(argv), int(done.get("rc", 0)), "", "", 0.0)
        started = self.view.steps_started.get((node, key))
        if started is None:
            return None
        if probe is None:
            raise StepFailed(f"{node}: '{shlex.join(self.redact(a) for a in argv)}' was interrupted and k3rollout "
                             "cannot tell whether it took effect; check the node by hand (runbooks/)")
        took = probe(ctx, started.get("meta") or {})
        self.record("step_settled", node=node, stage=ctx.stage, step=name, key=key, took_effect=took,
                    how="probe after an interrupted run")
        return CommandResult(node, tuple(argv), 0, "", "", 0.0) if took else None

    def kube(self, ctx: NodeCtx) -> Any:
        """The Kubernetes API for this node's cluster, from the controller: the kubeconfig
        the inventory names (``k3_kubeconfig``, relative to the inventory file, and
        ``k3_kube_context``), else the simulated cluster's, else the client's default
        (``$KUBECONFIG``, ``~/.kube/config``). One client per kubeconfig and context."""
        cfg, context = kubeconfig_for(ctx.vars, self.inventory.path, self.executor)
        with self._lock:
            apis = self._kube_apis
            api = apis.get((cfg, context))
            if api is None:
                try:
                    api = apis[(cfg, context)] = KubernetesApi(cfg, context)
                except KubernetesError as exc:
                    raise StepFailed(f"{ctx.node}: {exc}") from None
            return api

    def close_kube(self) -> None:
        apis, self._kube_apis = self._kube_apis, {}
        for api in apis.values():
            api.close()

    @property
    def can_run_ansible(self) -> bool:
        if getattr(self.executor, "kind", "") != "ssh":
            return False
        from k3rollout.transport import ansible as ansible_transport  # lazy: paramiko, for SSH runs only

        return ansible_transport.available()

    def ansible_step(self, ctx: NodeCtx, name: str, tasks_file: Path, extravars: dict[str, Any], *,
                     probe: Callable[[NodeCtx, dict[str, Any]], bool], timeout: float, _retry: bool = True) -> CommandResult:
        """Run a vendor task file via ansible-runner as one destructive (``once``) step."""
        # lazy: transport/ssh.py imports paramiko, which only an SSH run needs
        from k3rollout.transport import ansible as ansible_transport
        from k3rollout.transport.ssh import SSHExecutor

        key = f"{ctx.folder}/{name}"
        node = ctx.node
        executor = self.executor
        if not isinstance(executor, SSHExecutor):       # can_run_ansible: over SSH only
            raise StepFailed(f"{node}: vendor task files run through Ansible over SSH, not a {executor.kind} transport")
        # a missing controller tool stops the run (exit 2) before the step is journaled:
        # it is never the node's failure, so never a reason to roll the node back
        binary = require_tool("ansible-playbook", f"the driver stage runs {tasks_file.name} with ansible-runner")
        argv = ["ansible-playbook", str(tasks_file)]
        if _retry:
            earlier = self._replay_or_settle(ctx, name, key, argv, probe)
            if earlier is not None:
                return earlier
        self.record("step_started", node=node, stage=ctx.stage, step=name, key=key, argv=argv, once=True)
        attempt = self.view.step_starts.get((node, key), 1)
        private = RunDir(self.evidence.root.parent).ansible / node / f"{ctx.folder}-{name}-{attempt}"

        def on_event(ev: dict[str, Any]) -> None:
            self.record("ansible_event", node=node, stage=ctx.stage, step=name, key=key,
                        **{k: (self.redact(v) if isinstance(v, str) else v) for k, v in ev.items() if k != "host"})
            self.log.info("ansible_event", node=node, stage=ctx.stage, ansible_event=ev.get("event"),
                          task=ev.get("task"))

        started = time.monotonic()
        res = ansible_transport.run_tasks(executor.targets[node], self.inventory.hosts[node].vars,
                                          tasks_file, extravars, private, timeout=timeout, on_event=on_event,
                                          binary=binary)
        if res.unreachable and _retry:
            # the connection dropped mid-play: settle by probing the host; vendor task files
            # are idempotent by contract (pinned versions), so an unfinished one is re-run once
            self.record("step_error", node=node, stage=ctx.stage, step=name, key=key, error="unreachable",
                        message=f"ansible: host unreachable during {res.failed_task!r}")
            try:
                self.executor.wait_for_host(node, min(timeout, 300.0))
                took = probe(ctx, {})
            except (TransportError, StepFailed) as exc:
                raise StepFailed(self.redact(str(exc))) from None
            self.record("step_settled", node=node, stage=ctx.stage, step=name, key=key, took_effect=took,
                        how="probe after ansible lost the host")
            if took:
                return CommandResult(node, tuple(argv), 0, "", "", time.monotonic() - started)
            return self.ansible_step(ctx, name, tasks_file, extravars, probe=probe, timeout=timeout, _retry=False)
        ref = self.evidence.write(node, ctx.folder, name, f"$ {shlex.join(argv)}\n# host={node} rc={res.rc} "
                                  f"status={res.status} artifacts={res.artifacts}\n--- stdout ---\n"
                                  f"{self.redact(res.stdout)}")
        # ansible-runner's artifacts (events, stdout, status, rc) become evidence too
        art = Path(res.artifacts)
        for f in sorted(p for p in art.rglob("*") if p.is_file()) if art.is_dir() else []:
            self.evidence.write(node, ctx.folder, f"{name}-{attempt}-" + "_".join(f.relative_to(art).parts[1:]),
                                self.redact(f.read_text(errors="replace")))
        self.record("step_done", node=node, stage=ctx.stage, step=name, key=key, rc=res.rc, once=True,
                    duration_s=round(time.monotonic() - started, 3), evidence=ref.path, sha256=ref.sha256,
                    ansible_status=res.status, failed_task=res.failed_task, unreachable=res.unreachable,
                    # the tasks that reported a change: none proves the play changed nothing
                    # (engine/rollback.py, driver_untouched)
                    changed_tasks=[e.get("task") for e in res.events
                                   if e["event"] == "runner_on_ok" and e.get("changed")],
                    durable=False)        # its probe settles it, as for step() above
        tail = "\n".join(f"{e.get('task')}: {e.get('msg') or e.get('stderr') or ''}" for e in res.events
                         if e["event"] in ("runner_on_failed", "runner_on_unreachable"))
        return CommandResult(node, tuple(argv), res.rc, self.redact(res.stdout), self.redact(tail),
                             time.monotonic() - started)

    # ------------------------------------------------------------------ HTTP to the node

    @property
    def api(self) -> ApiClient:
        with self._lock:
            if self._api is None:
                from k3rollout.transport.http import ApiClient  # lazy: httpx, for a run that sends requests

                self._api = ApiClient()
            return self._api

    def api_base(self, ctx: NodeCtx, port: int) -> str:
        return self._target(ctx, port)[0]

    def _target(self, ctx: NodeCtx, port: int) -> tuple[str, ApiClient]:
        """Where a gate's request for the server on ``port`` of the node goes, and the client
        that sends it: the node's own address (a Docker host), or what the node's workload
        runtime names (the API server's pod proxy, with the kubeconfig's credentials)."""
        ep = ctx.workload.endpoint(ctx, port)
        if ep.auth is None:
            host = ctx.vars.get("api_host") or self.executor.api_host(ctx.node)
            host = f"[{host}]" if ":" in str(host) else host
            return f"http://{host}:{port}", self.api
        kube = self.kube(ctx)           # (takes the lock itself: not under it)
        with self._lock:
            client = self._proxy_clients.get(ep.auth)
            if client is None:
                from k3rollout.transport.http import ApiClient  # lazy: httpx, as in ``api``

                client = self._proxy_clients[ep.auth] = ApiClient(**kube.proxy_settings(),
                                                                  on_request=k8s_calls.record)
        return ep.base, client

    def http(self, ctx: NodeCtx, name: str, method: str, port: int, path: str, body: Any = None, *,
             stream: bool = False, timeout: float = 120.0, evidence: bool = True) -> HttpResult:
        """One request from the controller to the node's server: journaled (read-only, so
        without an fsync of its own) and, unless ``evidence=False``, kept with its reply."""
        base, client = self._target(ctx, port)
        url = base + path
        key = f"{ctx.folder}/{name}"
        self.record("step_started", node=ctx.node, stage=ctx.stage, step=name, key=key, argv=[method, url],
                    kind="http", once=False, durable=False)
        res = client.stream(url, body, timeout) if stream else client.request(method, url, body, timeout)
        ref = self.evidence.write(ctx.node, ctx.folder, name, self.redact(_http_evidence(ctx.node, res, body))) \
            if evidence else None
        self.record("step_done", node=ctx.node, stage=ctx.stage, step=name, key=key, kind="http",
                    rc=0 if res.ok else 1, http_status=res.status, error=res.error or None,
                    duration_s=round(res.elapsed_s, 4), evidence=ref.path if ref else None,
                    sha256=ref.sha256 if ref else None, durable=False)
        return res

    def http_many(self, ctx: NodeCtx, name: str, port: int, path: str, bodies: list[Any], *, stream: bool = True,
                  timeout: float = 300.0) -> list[HttpResult]:
        """``len(bodies)`` requests sent at once (one thread each): a concurrency step."""
        base, client = self._target(ctx, port)
        url = base + path
        key = f"{ctx.folder}/{name}"
        self.record("step_started", node=ctx.node, stage=ctx.stage, step=name, key=key,
                    argv=["POST", url, f"x{len(bodies)}"], kind="http", once=False, durable=False)
        started = time.monotonic()
        queued_s = None
        if stream:
            # within the process's stream budget, each stream on its own client: none waits
            # on a shared pool lock (transport/http.py)
            queued_s = self.streams.acquire(len(bodies))
            try:
                results = client.stream_many(url, bodies, timeout)
            finally:
                self.streams.release(len(bodies))
        else:
            # one worker each, in the engine's worker pool (engine/pool.py)
            results = run_each(lambda b: client.request("POST", url, b, timeout), bodies, workers=len(bodies),
                               name="k3http")
        lines = [f"> POST {url} x{len(bodies)} concurrent (stream={stream})", f"# host={ctx.node}"]
        if queued_s is not None:
            lines.append(f"# queued_s={queued_s:.4f} (streams at once in this process: {self.streams.limit})")
        for i, r in enumerate(results, 1):
            lines.append(f"{i}\tstatus={r.status}\telapsed_s={r.elapsed_s:.4f}\tttft_s="
                         f"{'' if r.ttft_s is None else f'{r.ttft_s:.4f}'}\tttft_channel={r.ttft_channel or ''}"
                         f"\terror={r.error or ''}")
        ref = self.evidence.write(ctx.node, ctx.folder, name, self.redact("\n".join(lines) + "\n"))
        bad = sum(1 for r in results if not r.ok)
        self.record("step_done", node=ctx.node, stage=ctx.stage, step=name, key=key, kind="http", rc=1 if bad else 0,
                    failed_requests=bad, duration_s=round(time.monotonic() - started, 4), evidence=ref.path,
                    sha256=ref.sha256, durable=False,
                    **({"queued_s": round(queued_s, 4)} if queued_s is not None else {}))
        return results

    def wait_for_host(self, ctx: NodeCtx, timeout: float) -> float:
        try:
            return self.executor.wait_for_host(ctx.node, timeout)
        except TransportError as exc:
            self.record("step_error", node=ctx.node, stage=ctx.stage, step="wait-for-host",
                        key=f"{ctx.folder}/wait-for-host", error=type(exc).__name__, message=str(exc))
            raise StepFailed(str(exc)) from None

    def record_evidence(self, ctx: NodeCtx, name: str, content: str) -> dict[str, Any]:
        ref = self.evidence.write(ctx.node, ctx.folder, name, self.redact(content))
        self.record("evidence", node=ctx.node, stage=ctx.stage, name=name, path=ref.path, sha256=ref.sha256)
        return ref.to_dict()
