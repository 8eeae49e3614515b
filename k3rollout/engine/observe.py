"""``k3rollout observe RUN_DIR``: after the window, the run's read-only checks again, over time.

The change record should end with evidence that the new driver stayed good, not with a
report frozen at the end of the window (docs/domain.md "Staying power"). Each pass re-runs, on
every node the run upgraded, the checks the run itself made, through the engine's own
step and HTTP primitives (journaled, output kept as evidence) and the stages' own check
functions:

- driver, kernel module and fabric manager versions (``nvidia-smi``, ``/proc``, packages);
- CUDA init in a throwaway ``--rm`` container of the run's image (only while the image is
  still on the node: a pass never pulls);
- each serving container the baseline saw: its state and restart count, its image digest,
  ``/health``, a short request, the prefix-cache proof and the tool-call checks, against
  the running server without restarting it;
- optionally the NCCL gate, only on nodes the scheduler shows idle (Slurm IDLE; no
  Kubernetes pod there requests ``nvidia.com/gpu``); a busy node is skipped, with why.

A pass compares what it found with the run's own evidence (``obs``, the keys listed in
``observe_context``) and evaluates the playbook's ``observe.keep_when`` and
``observe.rollback_when`` in the assertion sandbox. The decision is a recommendation that
names the rollback command and its owner: observation never rolls back, cordons, restarts
or changes anything, and takes no cluster lock (another rollout may hold it). Each pass is
appended to the run's own journal (``observation_started``, the steps, ``observation``),
so the hash chain stays whole and ``resume`` and the report read the run as before.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import structlog

from k3rollout.checks import parsers
from k3rollout.checks.triage import classify
from k3rollout.engine.clock import Clock
from k3rollout.engine.pool import run_each
from k3rollout.engine.runner import Redactor, secret_values
from k3rollout.engine.steps import StepRunner
from k3rollout.errors import InputError, LockHeld, StepFailed
from k3rollout.evidence.store import EvidenceStore
from k3rollout.model.assertions import evaluate_all
from k3rollout.model.playbook import MultinodeParams, play_vars
from k3rollout.report.render import write_reports
from k3rollout.report.result import build_result
from k3rollout.runlog.journal import Journal, JournalWriteError
from k3rollout.runlog.lock import holder_text
from k3rollout.runlog.rundir import RunDir
from k3rollout.runlog.view import RunView, fold
from k3rollout.scheduler import with_scheduler_hosts
from k3rollout.stages import features, multinode, thinking, vllm_server
from k3rollout.stages.base import NodeCtx
from k3rollout.stages.cuda_check import TORCH_INIT
from k3rollout.transport.base import CommandResult
from k3rollout.transport.factory import make_executor

STAGE = "observe"
DECISIONS = ("keep", "stay_isolated", "rollback")
# triage categories worth calling a recurrence ("other" says nothing about the cause)
RECURRING = frozenset({"driver_incompatible", "container_runtime", "model_load_capacity", "communication"})


class ReadOnlyRunner(StepRunner):
    """The engine's step and HTTP primitives for observation: every command and request is
    journaled and kept as evidence, and a destructive (``once``) step is refused."""

    def __init__(self, journal: Journal, evidence: EvidenceStore, executor: Any, inventory: Any,
                 redact: Callable[[str], str], log: Any):
        self.journal = journal
        # steps_started/steps_done: only ``once`` steps use them, never here
        super().__init__(record=self._append, view=RunView(), executor=executor, evidence=evidence, redact=redact,
                         inventory=inventory, log=log)

    def _append(self, type_: str, *, durable: bool = False, **data: Any) -> dict[str, Any]:
        return self.journal.append(type_, durable=durable, **data)

    def _stop_check(self) -> None:
        if self.stopping.is_set():
            raise StepFailed("observation stopping")

    def step(self, ctx: NodeCtx, name: str, argv: list[str], *, once: bool = False, **kw: Any) -> CommandResult:
        if once:
            raise StepFailed(f"{ctx.node}: observation runs read-only commands only; refused {argv[:3]}")
        self._stop_check()
        return super().step(ctx, name, argv, **kw)

    def http(self, ctx: NodeCtx, name: str, method: str, port: int, path: str, body: Any = None, **kw: Any) -> Any:
        self._stop_check()
        return super().http(ctx, name, method, port, path, body, **kw)

    def close(self) -> None:
        if self._api is not None:
            self._api.close()


def serve_target(args: list[str]) -> tuple[str | None, int]:
    """The model and port of a ``vllm serve`` container from its arguments (the image's
    entrypoint is ``vllm serve``: the model comes first, or as ``--model``)."""
    model, port = None, 8000
    rest = [a for a in args if a != "serve"]
    for i, a in enumerate(rest):
        key, eq, val = a.partition("=")
        if key in ("--model", "--port"):
            val = val if eq else (rest[i + 1] if i + 1 < len(rest) else "")
            if key == "--model":
                model = val
            elif val.isdigit():
                port = int(val)
    if model is None and rest and not rest[0].startswith("-"):
        model = rest[0]
    return model, port


def run_reference(view: RunView, nodes: list[str]) -> dict[str, Any]:
    """What the run itself proved, per node: the yardstick every pass is compared with."""
    per: dict[str, Any] = {}
    categories: set[str] = set()
    for n in view.nodes.values():
        if n.triage and n.triage.get("category") in RECURRING:
            categories.add(n.triage["category"])
        for pf in n.baseline.get("prior_failures") or []:
            if pf.get("triage") in RECURRING:
                categories.add(pf["triage"])
    for name in nodes:
        n = view.nodes[name]
        f = n.facts
        per[name] = {"driver_version": f.get("driver_version"), "module_version": f.get("module_version"),
                     "fabricmanager": f.get("fabricmanager"), "image": f.get("image"),
                     "image_digest": f.get("image_digest"), "image_cuda": f.get("image_cuda"),
                     "serving": [{"name": c["name"], "image": c.get("image"), "digest": c.get("digest")}
                                 for c in n.baseline.get("serving_containers") or []],
                     # each restarted serving container's RestartCount as the uncordon stage left it
                     # (absent in runs made before the stage recorded it)
                     "restart_counts": dict(f.get("serving_restart_counts") or {}),
                     "prefix_hit_rate": features.repeat_hit_rate(f.get("prefix_cache") or {}),
                     "tool_call_ok": f.get("tool_call_ok")}
    return {"nodes": per, "categories": sorted(categories)}


class Observer:
    def __init__(self, run_dir: Path, clock: Clock | None = None, log: Any = None):
        self.run_dir = Path(run_dir)
        self.rd = RunDir(self.run_dir)
        self.clock = clock or Clock()
        self.log = log or structlog.get_logger("k3rollout")
        path = self.rd.journal
        records = self.rd.open()        # read and verified; InputError unless the run started
        live = self.rd.live_holders()
        if live:
            raise LockHeld(f"{self.run_dir}: this run is in progress ({holder_text(live[0])}); observe it once it "
                           "has ended")
        self.view = fold(records)
        if self.view.status == "running":
            raise InputError("this run has not finished (it was interrupted): finish it with `k3rollout resume "
                             f"{self.run_dir}` (or roll it back) before observing it", path=str(path))
        self.playbook, self.inventory, _ = self.rd.reload_inputs()
        self.settings = self.playbook.play.observe
        self.play_vars = play_vars(self.playbook.play)
        result = build_result(self.view)
        self.nodes = [n for n, r in result["nodes"].items() if r["final"] == "upgraded"]
        if not self.nodes:
            raise InputError("no node of this run was upgraded: there is nothing to observe", path=str(path))
        missing = [n for n in self.nodes if n not in self.inventory.hosts]
        if missing:
            raise InputError(f"upgraded host(s) {missing} are no longer in the inventory", path=self.inventory.path)
        self.reference = run_reference(self.view, self.nodes)
        self.run_id = self.view.run_id or ""
        # passes are numbered on from the last one started (a pass killed mid-way keeps its number)
        self.index = max((r["index"] for r in records if r["type"] in ("observation_started", "observation")),
                         default=0)
        hv = [self.inventory.hosts[h].vars for h in self.nodes]
        vaulted = [v for v in getattr(self.inventory, "vault_values", ()) if len(v) >= 4]
        self.redact = Redactor(sorted(set(secret_values(self.play_vars, *hv)) | set(vaulted), key=len, reverse=True))
        self.stopping = threading.Event()
        self.runner: ReadOnlyRunner | None = None

    # ------------------------------------------------------------------ the loop

    def run(self, every_s: float, for_s: float, once: bool,
            on_pass: Callable[[dict[str, Any] | None], None] | None = None) -> dict[str, Any] | None:
        """Passes until ``for_s`` has gone by (one with ``once``); the last observation record.
        Only one ``observe`` of a run directory at a time (a file lock in it)."""
        guard = self.rd.lock_observe()
        try:
            deadline = time.monotonic() + for_s
            last = None
            while True:
                last = self.one_pass()
                if on_pass:
                    on_pass(last)
                if once or last is None:
                    return last
                wait = min(every_s, deadline - time.monotonic())
                if wait <= 0 or self.stopping.wait(wait):
                    return last
        finally:
            guard.release()

    def one_pass(self) -> dict[str, Any] | None:
        if self.rd.live_holders():
            raise LockHeld(f"{self.run_dir}: a resume or rollback of this run started; observation stops")
        self.index += 1
        index = self.index
        journal = Journal(self.rd.journal, self.clock.iso)
        evidence = EvidenceStore(self.rd.evidence)
        journal.extra_sync = evidence.sync
        executor = make_executor(with_scheduler_hosts(self.inventory.hosts, list(self.nodes)), self.run_dir,
                                 observation_pass=index)
        runner = self.runner = ReadOnlyRunner(journal, evidence, executor, self.inventory, self.redact,
                                              self.log.bind(run_id=self.run_id))
        rec = None
        try:
            journal.append("observation_started", index=index, nodes=list(self.nodes), pid=os.getpid(),
                           playbook_sha256=self.playbook.sha256)
            try:
                found = run_each(lambda n: self.observe_node(runner, n, index), self.nodes,
                                 workers=self.playbook.play.forks, stopping=runner.stopping, name="k3observe")
            except BaseException as exc:
                # SIGTERM or Ctrl-C (or an internal error): the worker pool (engine/pool.py) has
                # stopped the checks in flight at their next command and waited for them; the
                # pass is recorded as stopped, and nothing is left half written
                self.stopping.set()
                why = ("interrupted (SIGTERM or Ctrl-C)" if isinstance(exc, KeyboardInterrupt)
                       else f"stopped by an internal error ({type(exc).__name__}: {self.redact(str(exc))[:300]})")
                try:
                    journal.append("observation_stopped", index=index, reason=f"{why} during the pass; its checks "
                                   "so far are journaled above")
                except JournalWriteError:
                    pass            # another writer took the journal: this pass may add nothing more
                raise
            nodes = dict(zip(self.nodes, found, strict=True))
            obs, ev = observe_context(nodes, self.reference, index, self.view, self.clock.now())
            rules, decision = decide(self.settings, obs, self.play_vars)
            rec = journal.append("observation", index=index, nodes=nodes, evidence=ev, obs=obs, rules=rules,
                                 decision=decision,
                                 recommendation=recommendation(decision, rules, self.run_dir, self.play_vars),
                                 durable=True)
            self.view.observations.append(rec)      # the next pass of this process counts it
        finally:
            journal.close()
            runner.close()
            executor.close()
            evidence.close()
            write_reports(self.run_dir)
        return rec

    # ------------------------------------------------------------------ one node

    def observe_node(self, runner: ReadOnlyRunner, node: str, index: int) -> dict[str, Any]:
        n = self.view.nodes[node]
        ref = self.reference["nodes"][node]
        tv = {**self.inventory.hosts[node].vars, **self.play_vars, "inventory_hostname": node}
        ctx = NodeCtx(node=node, run_id=self.run_id, stage=STAGE, folder=f"observe-{index:03d}", params=None,
                      vars=tv, facts=dict(n.facts), baseline=dict(n.baseline), runner=runner)
        out: dict[str, Any] = {"reachable": True, "failures": [], "serving": []}
        try:
            self._driver(ctx, ref, out)
            self._cuda(ctx, ref, out)
            for name in self.settings.serving or [c["name"] for c in ref["serving"]]:
                out["serving"].append(self._serving(ctx, ref, name, index))
            out["scheduler_state"] = ctx.read_scheduler()
            if self.settings.nccl:
                self._nccl(ctx, out)
        except StepFailed as exc:
            out["reachable"] = False
            out["failures"].append({"check": "reach", "detail": self.redact(str(exc))[:500]})
        except parsers.ParseError as exc:
            # an answer that does not parse is a finding about the node, kept with the rest
            out["failures"].append({"check": "parse", "detail": self.redact(str(exc))[:500]})
        return out

    def _driver(self, ctx: NodeCtx, ref: dict[str, Any], out: dict[str, Any]) -> None:
        gpu = ctx.read_gpu()
        out["driver_version"] = gpu.get("driver_version")
        out["gpu_count"] = gpu.get("gpu_count")
        proc = ctx.step("proc-driver-version", ["cat", "/proc/driver/nvidia/version"])
        try:
            out["module_version"] = parsers.parse_proc_version(proc.stdout) if proc.ok else None
        except parsers.ParseError:
            out["module_version"] = None
        fm = ctx.step("fabricmanager", ["systemctl", "is-active", "nvidia-fabricmanager"])
        out["fabricmanager"] = fm.stdout.strip() or "unknown"
        fm_pkgs = [p for p in ctx.read_packages() if "fabricmanager" in p["name"] and p["status"].startswith("ii")]
        out["fabricmanager_package"] = (f"{fm_pkgs[0]['name']} {fm_pkgs[0]['version']}" if fm_pkgs else None)
        drift = []
        for key in ("driver_version", "module_version"):
            if ref.get(key) and out.get(key) != ref[key]:
                drift.append(f"{key} {out.get(key)} (the run left {ref[key]})")
        if ref.get("fabricmanager") == "active" and out["fabricmanager"] != "active":
            drift.append(f"fabric manager {out['fabricmanager']} (active after the run)")
        if fm_pkgs and out.get("driver_version") and not str(fm_pkgs[0]["version"]).split(":")[-1].startswith(
                str(out["driver_version"])):
            drift.append(f"fabric manager package {fm_pkgs[0]['version']} is not the driver's {out['driver_version']} "
                         "(NVSwitch systems need exactly the driver's version: CUDA error 802)")
        out["driver_drift"] = drift

    def _cuda(self, ctx: NodeCtx, ref: dict[str, Any], out: dict[str, Any]) -> None:
        image = ref.get("image")
        out["image_drift"] = []
        if not image:
            out["cuda_init_ok"] = None
            return
        img = ctx.image_facts(image)
        if img is None:
            # never pulled by a pass: a pull changes the node
            out["cuda_init_ok"] = None
            out["image_drift"].append(f"{image} is no longer on the node")
            return
        out["image_digest"] = img["digest"]
        if ref.get("image_digest") and img["digest"] != ref["image_digest"]:
            out["image_drift"].append(f"{image} is now {img['digest']} (the run proved {ref['image_digest']})")
        free, why = ctx.workload.gpu_work_allowed(ctx)
        if not free:
            # the GPUs belong to serving pods: a CUDA context beside them is GPU work on GPUs that serve
            out["cuda_init_ok"] = None
            out["cuda_init_skipped"] = why
            return
        init = ctx.workload.run_check(ctx, "cuda-init", image, "python3", ["-c", TORCH_INIT])
        # a runtime that would not start the check (Slurm: GPU jobs run there, or the node is
        # not free at once) skipped it: not a CUDA failure, and the reason is kept
        not_started = getattr(ctx.workload, "not_started", None)
        skipped = not_started(init) if not_started is not None and not init.ok else ""
        if skipped:
            out["cuda_init_ok"] = None
            out["cuda_init_skipped"] = skipped
            return
        out["cuda_init_ok"] = init.ok and "device_count=" in init.stdout
        if not out["cuda_init_ok"]:
            tri = classify(init.stdout + init.stderr, driver=out.get("driver_version"), image_cuda=img.get("cuda"),
                           stage="cuda_check", cuda_init_ok=False)
            out["failures"].append({"check": "cuda_init", "category": tri.category,
                                    "detail": self.redact((init.stdout + init.stderr)[-400:]),
                                    "evidence": tri.evidence[:3]})

    def _serving(self, ctx: NodeCtx, ref: dict[str, Any], name: str, index: int) -> dict[str, Any]:
        c: dict[str, Any] = {"name": name}
        seen = ctx.workload.serving_status(ctx, name)
        if seen["state"] == "missing":
            c.update(state="missing", ok=False, reason=seen["reason"])
            return c
        c["state"] = seen["state"]
        c["restart_count"] = seen["restart_count"]
        image = seen["image"]
        args = list(seen["args"])
        c["image"] = image
        base = next((s for s in ref["serving"] if s["name"] == name), None)
        if "digest" in seen:            # the runtime reports what runs (a pod's imageID)
            c["digest"] = seen["digest"]
        else:
            img = ctx.image_facts(image, f"serving-image-{name}") if image else None
            c["digest"] = img["digest"] if img else None
        if base and base.get("digest") and c["digest"] != base["digest"]:
            c["digest_drift"] = f"{image} is now {c['digest']} (the run left {base['digest']})"
        if c["state"] != "running":
            logs = ctx.workload.server_logs(ctx, name, f"serving-logs-{name}")
            tri = classify(logs.stdout + logs.stderr, stage="vllm_smoke")
            c.update(ok=False, reason=f"serving container {name} is {c['state']}", category=tri.category)
            return c
        model, port = serve_target(args)
        if "--headless" in args:
            # a multi-node replica's worker rank serves no API: its head node's container answers
            c.update(ok=True, headless=True, prefix_cache={"enabled": None}, tools={"enabled": None})
            return c
        sctx = replace(ctx, folder=f"{ctx.folder}-{name}")
        health = sctx.api("health", "GET", port, "/health", timeout=10)
        c["health_ok"] = health.ok
        # the name the server answers to (--served-model-name may differ from the weights' path)
        listed = sctx.api("models", "GET", port, "/v1/models", timeout=30)
        body = listed.json() if listed.ok else None
        served = [m.get("id") for m in (body.get("data") or [] if isinstance(body, dict) else [])
                  if isinstance(m, dict)]
        model = model if model in served or not served else served[0]
        c.update(model=model, port=port)
        good, resp = vllm_server.chat(sctx, "short-request", port, thinking.off({
            "model": model, "messages": [{"role": "user", "content": "Say hello in one word."}], "max_tokens": 16}),
            timeout=self.settings.request_timeout)
        c["short_request_ok"] = bool(good and vllm_server.message(resp).get("content"))
        # prefix caching is on by default in vLLM 0.33 (vllm/config/cache.py): only an explicit
        # --no-enable-prefix-caching (the last of the pair wins) turns it off
        caching = next((a == "--enable-prefix-caching" for a in reversed(args)
                        if a in ("--enable-prefix-caching", "--no-enable-prefix-caching")), True)
        if caching:
            # sized as the run's features stage sized it: a K3 server scores no hits on a
            # prefix under two of its 1,536-token blocks
            feats = next((st for st in self.playbook.stages if st.stage == "features"), None)
            block = feats.typed_params().prefix_block_tokens if feats is not None else None
            proof = features.prefix_cache_proof(sctx, port, model or "", 2, self.settings.prefix_words,
                                                block, seed=f"o{index}-")
            c["prefix_cache"] = {"enabled": True, "ok": proof["ok"], "reason": proof.get("reason", ""),
                                 "hit_rate": features.repeat_hit_rate(proof), "readings": proof.get("readings"),
                                 "inconclusive": bool(proof.get("inconclusive"))}
        else:
            c["prefix_cache"] = {"enabled": False, "reason": "launched with --no-enable-prefix-caching"}
        if self.settings.tool_call and "--enable-auto-tool-choice" in args:
            row = features.tools_step(sctx, SimpleNamespace(model=model, port=port))
            c["tools"] = {k: row.get(k) for k in ("passed", "reason", "tool_calls", "empty_tool_call", "tool_call_ok",
                                                  "retry_ok", "stream_ok", "stream_tool_call_ok")}
        else:
            c["tools"] = {"enabled": False, "reason": "launched without --enable-auto-tool-choice"}
        c["ok"] = c["health_ok"] and c["short_request_ok"]
        if not c["ok"]:
            c["reason"] = "health check failed" if not c["health_ok"] else f"short request failed: {str(resp)[:200]}"
        return c

    def _nccl(self, ctx: NodeCtx, out: dict[str, Any]) -> None:
        """The NCCL gate on one node, only when the scheduler shows nothing runs there (Slurm
        IDLE, no Kubernetes pod holding its GPUs): a busy node is skipped, its reason kept."""
        idle, why = ctx.scheduler.idle(ctx)
        out["scheduler_idle"] = {"idle": idle, "reason": why}
        if not idle:
            out["nccl"] = {"skipped": f"not idle: {why}; the NCCL gate never runs beside work"}
            return
        stage = next((s for s in self.playbook.stages if s.stage == "multinode"), None)
        params = stage.typed_params() if stage else MultinodeParams()
        ok, logs, facts = multinode.nccl_test(replace(ctx, params=params), [ctx.node], "nccl")
        # judged as the multinode stage judges: the largest size's bus bandwidth, no wrong rows
        passed = ok and facts.get("largest_busbw", 0) >= params.min_busbw_gbps and not facts.get("wrong_rows")
        out["nccl"] = {"ok": passed, **facts}
        if not passed:
            tri = classify(logs or "", stage="multinode")
            out["failures"].append({"check": "nccl", "category": tri.category if not ok else "communication",
                                    "detail": self.redact(logs[-400:]) if logs else
                                    f"bus bandwidth {facts.get('largest_busbw')} < {params.min_busbw_gbps} GB/s"})


def observe_context(nodes: dict[str, dict[str, Any]], reference: dict[str, Any], index: int, view: RunView,
                    now: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """``obs`` for the decision rules, and the four pieces of evidence for the report.

    ``obs`` keys: passes, hours_since_run, recurrence [{node, check, category}],
    cuda_failures, serving_failures, unreachable, prefix_hit_rate (lowest over the serving
    containers with prefix caching; None without), run_prefix_hit_rate (the run's lowest),
    prefix_hits_stopped, tool_call_failures, empty_tool_calls, restarts (containers
    restarted since the run left them, or not running), restart_baseline ({container:
    {count, source}}: the run's recorded RestartCount, or for a run that recorded none the
    first observation pass's), driver_drift, image_drift, nccl_failures. Lists name nodes
    (``node`` or ``node/container``)."""
    cats = set(reference["categories"])
    recurrence, cuda_failures, serving_failures, unreachable = [], [], [], []
    tool_failures, empty_calls, restarts, driver_drift, image_drift, nccl_failures = [], [], [], [], [], []
    rates: list[float] = []
    stopped, no_cache, no_tools, tools_checked = [], [], [], 0
    first = _first_restarts(view)
    recorded = {f"{node}/{name}": count for node, ref in reference["nodes"].items()
                for name, count in (ref.get("restart_counts") or {}).items() if isinstance(count, int)}
    baseline: dict[str, dict[str, Any]] = {}
    from_first: list[str] = []
    for node, r in nodes.items():
        # not reached, or an answer that did not parse: the node could not be checked
        if not r.get("reachable") or any(f["check"] == "parse" for f in r["failures"]):
            unreachable.append(node)
        for f in r["failures"]:
            if f.get("category") in cats:
                recurrence.append({"node": node, "check": f["check"], "category": f["category"]})
            if f["check"] == "cuda_init":
                cuda_failures.append(node)
            if f["check"] == "nccl":
                nccl_failures.append(node)
        driver_drift += [f"{node}: {d}" for d in r.get("driver_drift") or []]
        image_drift += [f"{node}: {d}" for d in r.get("image_drift") or []]
        for c in r.get("serving") or []:
            key = f"{node}/{c['name']}"
            if c.get("category") in cats:
                recurrence.append({"node": node, "check": f"serving {c['name']}", "category": c["category"]})
            if not c.get("ok"):
                serving_failures.append(key)
            if c.get("digest_drift"):
                image_drift.append(f"{key}: {c['digest_drift']}")
            rc = c.get("restart_count")
            if key in recorded:
                baseline[key] = {"count": recorded[key], "source": "run"}
            else:
                # a run made before the uncordon stage recorded restart counts (or a container
                # the run did not restart): the first observation pass is the yardstick
                from_first.append(key)
                if key in first:
                    baseline[key] = {"count": first[key], "source": "first observation pass"}
            if c.get("state") not in (None, "running") or (
                    isinstance(rc, int) and key in baseline and rc > baseline[key]["count"]):
                restarts.append(key)
            pc = c.get("prefix_cache") or {}
            if pc.get("enabled") is False:
                no_cache.append(key)
            if (c.get("tools") or {}).get("enabled") is False:
                no_tools.append(key)
            if pc.get("enabled"):
                if pc.get("hit_rate") is not None:
                    rates.append(pc["hit_rate"])
                if not pc.get("ok") and not pc.get("inconclusive"):
                    stopped.append(key)
            t = c.get("tools") or {}
            tools_checked += t.get("passed") is not None
            if t.get("passed") is False:
                tool_failures.append(key)
            if t.get("empty_tool_call"):
                empty_calls.append(key)
    run_rates = [v["prefix_hit_rate"] for v in reference["nodes"].values() if v.get("prefix_hit_rate") is not None]
    finished = view.finished or view.last_ts
    hours = round((now - datetime.fromisoformat(finished).timestamp()) / 3600, 2) if finished else None
    obs: dict[str, Any] = {"passes": len(view.observations) + 1, "index": index, "hours_since_run": hours,
           "recurrence": recurrence, "cuda_failures": sorted(cuda_failures), "serving_failures": serving_failures,
           "unreachable": unreachable, "prefix_hit_rate": min(rates) if rates else None,
           "run_prefix_hit_rate": min(run_rates) if run_rates else None, "prefix_hits_stopped": bool(stopped),
           "prefix_stopped_on": stopped, "tool_call_failures": tool_failures, "empty_tool_calls": empty_calls,
           "restarts": restarts, "restart_baseline": baseline, "driver_drift": driver_drift, "image_drift": image_drift,
           "nccl_failures": nccl_failures, "run_categories": sorted(cats)}
    evidence = {
        "recurrence": {"ok": not recurrence and not cuda_failures,
                       "detail": ("; ".join(f"{x['node']} {x['check']}: {x['category']}" for x in recurrence)
                                  or (f"CUDA init fails on {', '.join(cuda_failures)}" if cuda_failures else
                                      f"none of the run's triaged categories ({', '.join(sorted(cats)) or 'none'}) "
                                      "seen again"))},
        # ok None: not checked this pass (no serving container runs with the feature on)
        "prefix_cache": {"ok": (None if not stopped and obs["prefix_hit_rate"] is None else
                                not stopped and (obs["run_prefix_hit_rate"] is None
                                                 or obs["prefix_hit_rate"] >= obs["run_prefix_hit_rate"])),
                         "detail": (f"hits stopped on {_names(stopped)}" if stopped else
                                    f"repeat hit rate {_pct(obs['prefix_hit_rate'])} (the run: "
                                    f"{_pct(obs['run_prefix_hit_rate'])})")
                         + (f"; not checked on {_names(no_cache)} (launched with --no-enable-prefix-caching)"
                            if no_cache else "")},
        "tool_calls": {"ok": None if not tools_checked else not tool_failures and not empty_calls,
                       "detail": (f"failed on {_names(tool_failures)}" if tool_failures else
                                  "valid calls, streamed and not, and on retry" if tools_checked else
                                  "no tool-call check ran")
                       + (f"; empty calls on {_names(empty_calls)}" if empty_calls else "")
                       + (f"; not checked on {_names(no_tools)} (launched without --enable-auto-tool-choice)"
                          if no_tools else "")},
        "maintainability": {"ok": not (driver_drift or image_drift or restarts or unreachable),
                            "detail": ("; ".join(driver_drift + image_drift
                                                + [f"{k} restarted or not running" for k in restarts]
                                                + [f"{k} unreachable" for k in unreachable])
                            or "driver, fabric manager and images as the run left them; no serving restarts")
                           + (f"; serving restart counts of {_names(from_first)} compared with the first "
                              "observation pass (the run recorded none)" if from_first else "")},
    }
    return obs, evidence


def _names(keys: list[str]) -> str:
    return ", ".join(keys) if len(keys) <= 4 else f"{', '.join(keys[:3])} and {len(keys) - 3} more"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _first_restarts(view: RunView) -> dict[str, int]:
    first: dict[str, int] = {}
    for o in view.observations:
        for node, res in o["nodes"].items():
            for c in res.get("serving") or []:
                if isinstance(c.get("restart_count"), int):
                    first.setdefault(f"{node}/{c['name']}", c["restart_count"])
    return first


def decide(settings: Any, obs: dict[str, Any], pvars: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Rollback when any ``rollback_when`` holds, keep when every ``keep_when`` holds,
    otherwise stay isolated. A rule that errs (an undefined name) counts as holding for
    ``rollback_when`` and as not holding for ``keep_when``: a broken rule never keeps."""
    ctx = {**pvars, "vars": dict(pvars), "obs": obs}
    rb = evaluate_all(list(settings.rollback_when), ctx)
    keep = evaluate_all(list(settings.keep_when), ctx)
    rules = {"rollback_when": [{**r.to_dict(), "holds": r.passed or r.error is not None} for r in rb],
             "keep_when": [{**r.to_dict(), "holds": r.passed} for r in keep]}
    if any(r["holds"] for r in rules["rollback_when"]):
        return rules, "rollback"
    if all(r["holds"] for r in rules["keep_when"]):
        return rules, "keep"
    return rules, "stay_isolated"


def recommendation(decision: str, rules: dict[str, Any], run_dir: Path, pvars: dict[str, Any]) -> dict[str, Any]:
    owner = str(pvars.get("rollback_owner") or "not named: set rollback_owner in the playbook's vars")
    command = f"k3rollout rollback {run_dir}"
    if decision == "rollback":
        why = [r["that"] + (f" ({r['error']})" if r.get("error") else "") for r in rules["rollback_when"]
               if r["holds"]]
        text = (f"Recommend rolling back: {'; '.join(why)}. The decision is the rollback owner's ({owner}); "
                f"observation changed nothing. To roll back: `{command}`.")
    elif decision == "keep":
        why = []
        text = "Recommend keeping the new driver: every keep_when rule holds. No action."
    else:
        why = [r["that"] + (f" ({r['error']})" if r.get("error") else "") for r in rules["keep_when"]
               if not r["holds"]]
        text = (f"Recommend staying on the isolated (upgraded) nodes, expanding no further, and observing again: not "
                f"every keep_when rule holds ({'; '.join(why)}). If it gets worse, the rollback is `{command}`, "
                f"owner {owner}.")
    return {"decision": decision, "owner": owner, "command": command, "why": why, "text": text}
