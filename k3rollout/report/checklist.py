"""docs/domain.md's ten sign-off items, each judged only from recorded facts and evidence.

An item is ``done`` only when a fact proves it and the evidence behind it is linked;
``partial`` when some of it is proven; ``missing`` otherwise. Nothing is ticked from
configuration alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from k3rollout.runlog.view import RunView


def _ev(v: RunView, pred: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    return list(itertools.islice((e for e in v.evidence if pred(e)), 4))


def evaluate(v: RunView, play_vars: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    pv = play_vars or {}
    nodes = list(v.nodes.values())
    facts = [n.facts for n in nodes]
    items: list[dict[str, Any]] = []

    def add(num: int, title: str, status: str, detail: str, evidence: list[dict[str, Any]]) -> None:
        items.append({"item": num, "title": title, "status": status, "detail": detail,
                      "evidence": [{"path": e["path"], "sha256": e["sha256"]} for e in evidence]})

    prior = [(n.name, p) for n in nodes for p in n.baseline.get("prior_failures", [])]
    add(1, "Original r575 failure logs and container details saved",
        "done" if prior else "missing",
        "; ".join(f"{name}: container {p['container']} logs saved, triaged {p['triage']}" for name, p in prior[:3])
        or "no failed K3 container found at baseline",
        _ev(v, lambda e: "failed-container" in (e.get("step") or "")))
    imgs = {(f.get("image"), f.get("image_digest"), f.get("image_cuda")) for f in facts if f.get("image_digest")}
    official = [i for i in imgs if i[0] and i[0].startswith("vllm/vllm-openai:") and str(i[2]).startswith("13.")]
    add(2, "Image confirmed as the official cu130 one (or self-built source recorded)",
        "done" if official else "missing",
        "; ".join(f"{i[0]} digest {i[1]} CUDA {i[2]}" for i in sorted(imgs, key=str)) or "no image inspected",
        _ev(v, lambda e: "image-inspect" in (e.get("step") or "") and "cuda_check" in e["path"]))
    cuda_ok = [n.name for n in nodes if n.facts.get("cuda_init_ok") and (n.facts.get("driver_branch") or 0) >= 580]
    add(3, "r580+ driver initialises CUDA on an isolated node", "done" if cuda_ok else "missing",
        f"CUDA init passed on {len(cuda_ok)} node(s) on r580+ ({', '.join(cuda_ok[:5])})" if cuda_ok else
        "no node passed CUDA init on r580+", _ev(v, lambda e: e.get("step") == "cuda-init"))
    smoke = [n.name for n in nodes if n.facts.get("smoke_request_ok")]
    add(4, "Model loaded and short requests pass", "done" if smoke else "missing",
        f"minimal launch + short request passed on {len(smoke)} node(s)" if smoke else "no smoke test passed",
        _ev(v, lambda e: e.get("step") == "short-request"))
    flag = [n.name for n in nodes if n.facts.get("prefix_caching_flag")]
    add(5, "--enable-prefix-caching explicitly present", "done" if flag else "missing",
        f"present in the feature launch on {len(flag)} node(s)" if flag else "not in any recorded launch",
        _ev(v, lambda e: (e.get("step") or "").endswith("features-run")))
    proof = [n.name for n in nodes if (n.facts.get("prefix_cache") or {}).get("ok")]
    tried = [n.name for n in nodes if n.facts.get("prefix_cache")]
    add(6, "Repeated identical prefix requests recorded, with cache-hit evidence",
        "done" if proof else ("partial" if tried else "missing"),
        f"hits rose on the repeated prefix on {len(proof)} of {len(tried)} tested node(s)" if tried else "not tested",
        _ev(v, lambda e: "prefix-cache-proof" in e["path"]))
    tools = [n.name for n in nodes if n.facts.get("tool_call_ok")]
    nccl = [n.name for n in nodes if n.facts.get("nccl_ok")]
    ladders = [n for n in nodes if n.facts.get("ladder")]
    conc = [n.name for n in ladders if n.facts.get("concurrency_levels_passed")]
    # OOM: the load step recorded GPU memory and restarts per level, and a start-up OOM
    # would have been triaged model_load_capacity
    oom = [n.name for n in ladders if any(r.get("step") == "concurrency" and r.get("gpu_mem_used_mib") is not None
                                          and r.get("restarts") is not None for r in n.facts["ladder"])]
    parts = (("OOM (GPU memory and restarts per load level)", oom), ("concurrency ladder", conc),
             ("tool calling", tools), ("cross-node communication", nccl))
    have = [x for x, ok in parts if ok]
    lacking = [x for x, ok in parts if not ok]
    conc_top = max((max(n.facts["concurrency_levels_passed"]) for n in ladders
                    if n.facts.get("concurrency_levels_passed")), default=None)
    add(7, "OOM, concurrency, tool calling and cross-node communication tested separately",
        "done" if not lacking else ("partial" if have else "missing"),
        f"recorded: {', '.join(have) or 'none'}" + (f"; not recorded: {', '.join(lacking)}" if lacking else "")
        + (f"; highest concurrency passed: {conc_top}" if conc else ""),
        _ev(v, lambda e: "load-ladder" in e["path"] or e.get("step") in ("tool-call",)
            or "all-reduce" in (e.get("step") or "")))
    empties = [n.name for n in nodes if "empty_tool_call" in n.facts]
    correct = [n.name for n in nodes if n.facts.get("tool_call_ok") and n.facts.get("structured_output_ok")]
    retries = [n.name for n in nodes if "tool_call_retry_ok" in n.facts]
    parts8 = (("response correctness (tool arguments, structured output)", correct),
              ("empty-tool-call check", empties), ("retry behaviour", retries))
    lacking8 = [x for x, ok in parts8 if not ok]
    add(8, "Agent response correctness, empty tool calls and retry behaviour recorded",
        "done" if not lacking8 else ("partial" if len(lacking8) < 3 else "missing"),
        "; ".join(f"{x} on {len(ok)} node(s)" for x, ok in parts8 if ok)
        + (f"; not recorded: {', '.join(lacking8)}" if lacking8 else ""),
        _ev(v, lambda e: e.get("step") in ("tool-call", "tool-call-retry", "tool-call-stream", "structured-output")))
    mfp = (v.plan or {}).get("max_fail_percentage")
    add(9, "Conditions for keeping the new driver, staying isolated, or rolling back written",
        "done" if v.plan else "missing",
        f"post-assertions per stage decide keep vs roll back; max_fail_percentage {mfp}; "
        f"min_serving {(v.plan or {}).get('min_serving')}; playbook sha256 {(v.plan or {}).get('playbook_sha256')}"
        + (f"; after the window the playbook's observe rules (keep_when, rollback_when) decided "
           f"{v.observations[-1]['decision']} at observation pass {v.observations[-1]['index']}"
           if v.observations else ""),
        v.run_evidence[:4])            # _ev(v, lambda e: e["node"] == "_run"), without reading every step's
    owner = pv.get("rollback_owner")
    plans = [n for n in nodes if n.rollback_plan]
    ok10 = bool(owner) and bool(plans)
    add(10, "Rollback owner, point in time and the restorable original image named",
        "done" if ok10 else ("partial" if plans else "missing"),
        (f"owner {owner}; " if owner else "no rollback_owner var; ")
        + f"rollback plans recorded for {len(plans)} node(s) at baseline time; original images: "
        + ", ".join(sorted({f"{c['image']}@{c.get('digest')}" for n in plans
                            for c in n.baseline.get('serving_containers', [])})[:3]),
        _ev(v, lambda e: "rollback-plan" in e["path"]))
    return items
