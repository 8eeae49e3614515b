"""The simulated vLLM OpenAI-compatible server's behaviour: start-up, requests, metrics.

Launch flags are honoured the way vLLM honours them: prefix caching is off unless
``--enable-prefix-caching`` is given (Kimi K3's default, per DOMAIN.md), ``"auto"``
tool choice needs ``--enable-auto-tool-choice`` and ``--tool-call-parser``, and the
Prometheus metric names are vLLM's (``vllm:prefix_cache_queries_total`` ...).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any

BLOCK = 16  # vLLM's default KV block size, in tokens

KNOWN_FLAGS_WITH_VALUE = {"--model", "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "--load-format",
                          "--tool-call-parser", "--reasoning-parser", "--port", "--host", "--max-model-len",
                          "--gpu-memory-utilization", "--served-model-name", "--data-parallel-size",
                          "--kv-cache-dtype", "--quantization", "--decode-context-parallel-size", "-dcp",
                          "--max-num-seqs", "--mm-encoder-tp-mode", "--all2all-backend"}
KNOWN_BOOL_FLAGS = {"--trust-remote-code", "--enable-prefix-caching", "--no-enable-prefix-caching",
                    "--enable-auto-tool-choice", "--enable-expert-parallel", "--enforce-eager",
                    "--disable-log-requests"}


def parse_serve_args(args: list[str]) -> tuple[dict[str, Any] | None, str | None]:
    opts: dict[str, Any] = {}
    model = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "serve":
            i += 1
            continue
        key, eq, val = a.partition("=")
        if key in KNOWN_FLAGS_WITH_VALUE:
            if not eq:
                if i + 1 >= len(args):
                    return None, f"vllm serve: error: argument {key}: expected one argument"
                i += 1
                val = args[i]
            opts[key.lstrip("-").replace("-", "_")] = val
        elif a in KNOWN_BOOL_FLAGS:
            opts[a.lstrip("-").replace("-", "_")] = True
        elif a.startswith("-"):
            return None, f"vllm serve: error: unrecognized arguments: {a}"
        elif model is None:
            model = a
        else:
            return None, f"vllm serve: error: unrecognized arguments: {a}"
        i += 1
    opts["model"] = opts.get("model") or model or "facebook/opt-125m"
    opts.setdefault("tensor_parallel_size", opts.pop("tp", "1"))
    opts["port"] = int(opts.get("port", 8000))
    return opts, None


def _ts() -> str:
    return time.strftime("%m-%d %H:%M:%S")


def startup_logs(opts: dict[str, Any], version: str) -> list[str]:
    non_default = {k: v for k, v in opts.items() if k != "port"}
    return [
        f"INFO {_ts()} [api_server.py:1896] vLLM API server version {version}",
        f"INFO {_ts()} [utils.py:328] non-default args: {non_default!r}",
        f"INFO {_ts()} [model.py:547] Resolved architecture: KimiK3ForCausalLM",
        f"INFO {_ts()} [model.py:1510] Using max model len 1048576",
        f"INFO {_ts()} [core.py:77] Initializing a V1 LLM engine (v{version}) with config: model='{opts['model']}', "
        f"tensor_parallel_size={opts['tensor_parallel_size']}, enable_prefix_caching="
        f"{bool(opts.get('enable_prefix_caching'))}",
        f"INFO {_ts()} [parallel_state.py:1165] rank 0 in world size {opts['tensor_parallel_size']} is assigned as "
        "DP rank 0, PP rank 0, TP rank 0, EP rank 0",
        f"INFO {_ts()} [gpu_model_runner.py:2602] Starting to load model {opts['model']}...",
    ]


def ready_logs(opts: dict[str, Any]) -> list[str]:
    return [
        f"INFO {_ts()} [default_loader.py:267] Loading weights took 412.31 seconds",
        f"INFO {_ts()} [gpu_model_runner.py:2653] Model loading took 96.54 GiB and 421.77 seconds",
        f"INFO {_ts()} [gpu_worker.py:298] Available KV cache memory: 31.62 GiB",
        f"INFO {_ts()} [kv_cache_utils.py:1087] GPU KV cache size: 1,036,288 tokens",
        f"INFO {_ts()} [api_server.py:1971] Starting vLLM API server 0 on http://0.0.0.0:{opts['port']}",
        "INFO:     Started server process [1]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
    ]


def cuda_insufficient_logs() -> list[str]:
    return [
        f"ERROR {_ts()} [core.py:708] EngineCore failed to start.",
        "ERROR [core.py:708] Traceback (most recent call last):",
        'ERROR [core.py:708]   File "/usr/local/lib/python3.12/dist-packages/vllm/platforms/cuda.py", line 71, '
        "in device_count",
        "ERROR [core.py:708]     return torch.cuda.device_count()",
        "ERROR [core.py:708] RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? Error 35: CUDA driver "
        "version is insufficient for CUDA runtime version",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]


def cuda_not_ready_logs() -> list[str]:
    # Error 802 (cudaErrorSystemNotReady): on NVSwitch systems the fabric manager is not
    # running or does not match the driver, typical right after a driver upgrade.
    return [
        f"ERROR {_ts()} [core.py:708] EngineCore failed to start.",
        "ERROR [core.py:708] RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? Error 802: system not "
        "yet initialized",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]


def oom_logs(gpu_mem_gib: int) -> list[str]:
    total = gpu_mem_gib - 1.19
    return [
        "NCCL INFO Bootstrap : Using eth0:10.0.0.11<0>",
        "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.11<0>",
        "NCCL INFO Connected all rings",
        f"ERROR {_ts()} [core.py:708] EngineCore failed to start.",
        f"ERROR [core.py:708] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 3 has a "
        f"total capacity of {total:.2f} GiB of which 612.00 MiB is free. Process 41233 has {total - 0.6:.2f} GiB "
        "memory in use. Of the allocated memory 137.02 GiB is allocated by PyTorch, and 1.38 GiB is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]


def new_server(container: str, opts: dict[str, Any], faults: list[str]) -> dict[str, Any]:
    return {"container": container, "status": "running", "opts": opts, "faults": list(faults),
            "blocks": [], "m": {"queries": 0, "hits": 0, "prompt": 0, "gen": 0, "ok": 0, "lat": []}}


def _tokens(body: dict[str, Any]) -> list[str]:
    parts: list[str] = []
    for m in body.get("messages", []):
        c = m.get("content")
        if isinstance(c, list):
            c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
        parts.append(f"<|{m.get('role', 'user')}|> {c or ''}")
    if body.get("tools"):
        parts.append(json.dumps(body["tools"], sort_keys=True))
    return re.findall(r"\S+", " ".join(parts))


def _error(code: int, kind: str, msg: str) -> tuple[int, dict[str, Any]]:
    return code, {"object": "error", "message": msg, "type": kind, "param": None, "code": code}


def _example(schema: dict[str, Any]) -> Any:
    t = schema.get("type")
    if t == "object":
        props = schema.get("properties", {})
        req = schema.get("required", list(props))
        return {k: _example(props.get(k, {})) for k in req}
    if "enum" in schema:
        return schema["enum"][0]
    return {"string": "Beijing", "integer": 1, "number": 1.0, "boolean": True, "array": []}.get(t, "x")


def chat(server: dict[str, Any], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    opts = server["opts"]
    served = opts.get("served_model_name") or opts["model"]
    if body.get("model") not in (served, None):
        return _error(404, "NotFoundError", f"The model `{body.get('model')}` does not exist.")
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return _error(400, "BadRequestError", "messages: field required")
    tools = body.get("tools") or []
    choice = body.get("tool_choice", "auto" if tools else "none")
    if tools and choice == "auto" and not (opts.get("enable_auto_tool_choice") and opts.get("tool_call_parser")):
        return _error(400, "BadRequestError",
                      '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
    toks = _tokens(body)
    started = time.perf_counter()
    # prefix cache: chained hashes of full blocks, like vLLM's block hashing
    hit = 0
    caching = bool(opts.get("enable_prefix_caching")) and not opts.get("no_enable_prefix_caching")
    h = ""
    hashes = []
    for i in range(0, len(toks) - len(toks) % BLOCK, BLOCK):
        h = hashlib.sha256((h + "\x00" + " ".join(toks[i:i + BLOCK])).encode()).hexdigest()[:16]
        hashes.append(h)
    if caching:
        known = set(server["blocks"])
        for hh in hashes:
            if hh not in known:
                break
            hit += BLOCK
        if "prefix_cache_miss" not in server["faults"]:
            server["blocks"] = list(known.union(hashes))[-200000:]
    m = server["m"]
    m["queries"] += len(toks)
    m["hits"] += hit
    m["prompt"] += len(toks)
    msg: dict[str, Any] = {"role": "assistant", "content": None, "reasoning_content": None, "tool_calls": []}
    finish = "stop"
    if tools and choice != "none":
        fn = tools[0].get("function", {})
        args = _example(fn.get("parameters", {"type": "object"}))
        msg["tool_calls"] = [{"id": f"chatcmpl-tool-{hashlib.md5(json.dumps(body).encode()).hexdigest()[:24]}",
                              "type": "function",
                              "function": {"name": fn.get("name", ""), "arguments": json.dumps(args)}}]
        finish = "tool_calls"
        gen = 24
    elif isinstance(body.get("response_format"), dict) and body["response_format"].get("type") == "json_schema":
        schema = body["response_format"].get("json_schema", {}).get("schema", {})
        msg["content"] = json.dumps(_example(schema))
        gen = 16
    else:
        msg["content"] = "Hello."
        gen = 3
    m["gen"] += gen
    m["ok"] += 1
    m["lat"].append(round(time.perf_counter() - started + 0.05 + len(toks) * 1e-5, 6))
    m["lat"] = m["lat"][-1000:]
    return 200, {
        "id": f"chatcmpl-{hashlib.md5(repr(time.time()).encode()).hexdigest()}", "object": "chat.completion",
        "created": int(time.time()), "model": served,
        "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": finish, "stop_reason": None}],
        "usage": {"prompt_tokens": len(toks), "total_tokens": len(toks) + gen, "completion_tokens": gen,
                  "prompt_tokens_details": None},
    }


def metrics(server: dict[str, Any]) -> str:
    opts, m = server["opts"], server["m"]
    lab = f'engine="0",model_name="{opts.get("served_model_name") or opts["model"]}"'
    out = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} 0.0",
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} 0.0",
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc{{{lab}}} 0.0",
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
        "# TYPE vllm:prefix_cache_queries_total counter", f"vllm:prefix_cache_queries_total{{{lab}}} {float(m['queries'])}",
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
        "# TYPE vllm:prefix_cache_hits_total counter", f"vllm:prefix_cache_hits_total{{{lab}}} {float(m['hits'])}",
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter", f"vllm:prompt_tokens_total{{{lab}}} {float(m['prompt'])}",
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter", f"vllm:generation_tokens_total{{{lab}}} {float(m['gen'])}",
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{{lab},finished_reason="stop"}} {float(m["ok"])}',
        "# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.",
        "# TYPE vllm:e2e_request_latency_seconds histogram",
    ]
    lat = m["lat"]
    for le in (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0):
        out.append(f'vllm:e2e_request_latency_seconds_bucket{{{lab},le="{le}"}} {float(sum(1 for x in lat if x <= le))}')
    out.append(f'vllm:e2e_request_latency_seconds_bucket{{{lab},le="+Inf"}} {float(len(lat))}')
    out.append(f"vllm:e2e_request_latency_seconds_count{{{lab}}} {float(len(lat))}")
    out.append(f"vllm:e2e_request_latency_seconds_sum{{{lab}}} {float(sum(lat))}")
    return "\n".join(out) + "\n"
