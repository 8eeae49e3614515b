"""The simulated vLLM OpenAI-compatible server's behaviour: start-up, requests, metrics.

Launch flags are honoured the way vLLM 0.33 honours them: prefix caching is on unless
``--no-enable-prefix-caching`` is given (Kimi K3 included), ``"auto"``
tool choice needs ``--enable-auto-tool-choice`` and ``--tool-call-parser``, and the
Prometheus metric names are vLLM's (``vllm:prefix_cache_queries_total`` ...).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from typing import Any

BLOCK = 16  # vLLM's default KV block size, in tokens
TOKEN_CHARS = 4  # the simulated tokenizer's longest piece of a word, in characters
# Kimi K3 caches prefixes in 1,536-token blocks and never reuses the last matched block, so a
# shared prefix under about two blocks scores zero hits by design (docs/domain.md "Prefix cache";
# the recipe's prefix_cache_block_tokens in playbooks/profiles/kimi-k3.yml)
K3_BLOCK = 1536

KNOWN_FLAGS_WITH_VALUE = {"--model", "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "--load-format",
                          "--tool-call-parser", "--reasoning-parser", "--port", "--host", "--max-model-len",
                          "--gpu-memory-utilization", "--served-model-name", "--data-parallel-size",
                          "--kv-cache-dtype", "--quantization", "--decode-context-parallel-size", "-dcp",
                          "--max-num-seqs", "--mm-encoder-tp-mode", "--block-size", "--all2all-backend", "--moe-backend",
                          # multi-node (vllm/config/parallel.py): --nnodes/--node-rank/--master-addr, and the
                          # data-parallel form's address, RPC port, local size and start rank
                          "--nnodes", "--node-rank", "--master-addr", "--master-port", "--data-parallel-size-local",
                          "--data-parallel-address", "--data-parallel-rpc-port", "--data-parallel-start-rank",
                          "--prefill-context-parallel-size", "-pcp"}
KNOWN_BOOL_FLAGS = {"--trust-remote-code", "--enable-prefix-caching", "--no-enable-prefix-caching",
                    "--enable-auto-tool-choice", "--enable-expert-parallel", "--enforce-eager",
                    "--disable-log-requests", "--disable-log-stats", "--headless", "--disable-custom-all-reduce"}


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
        elif a in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
            # one boolean flag and its negation: the last one given wins, as in argparse
            opts["enable_prefix_caching"] = a == "--enable-prefix-caching"
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
    if "pcp" in opts:
        opts.setdefault("prefill_context_parallel_size", opts.pop("pcp"))
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
        f"INFO {_ts()} [model.py:1510] Using max model len {opts.get('max_model_len', MAX_MODEL_LEN_DEFAULT)}",
        f"INFO {_ts()} [core.py:77] Initializing a V1 LLM engine (v{version}) with config: model='{opts['model']}', "
        f"tensor_parallel_size={opts['tensor_parallel_size']}, enable_prefix_caching="
        f"{opts.get('enable_prefix_caching', True)}",
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


def core_failed(dp: int = 1, rank: int = 0) -> str:
    """The API server's last line when its engine core process died at start-up: the dict is
    ``CoreEngineProcManager.finished_procs()``, each process's name and exit code, named
    ``EngineCore`` or, with data parallel above 1, ``EngineCore_DP<rank>``
    (vllm/v1/engine/utils.py: wait_for_engine_startup, CoreEngineProcManager)."""
    name = f"EngineCore_DP{rank}" if dp > 1 else "EngineCore"
    return f"RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{'{name}': 1}}"


def cuda_insufficient_logs() -> list[str]:
    return [
        f"ERROR {_ts()} [core.py:1584] EngineCore failed to start.",
        "ERROR [core.py:1584] Traceback (most recent call last):",
        'ERROR [core.py:1584]   File "/usr/local/lib/python3.12/dist-packages/vllm/platforms/cuda.py", line 71, '
        "in device_count",
        "ERROR [core.py:1584]     return torch.cuda.device_count()",
        "ERROR [core.py:1584] RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? Error 35: CUDA driver "
        "version is insufficient for CUDA runtime version",
        core_failed(),
    ]


def cuda_not_ready_logs() -> list[str]:
    # Error 802 (cudaErrorSystemNotReady): on NVSwitch systems the fabric manager is not
    # running or does not match the driver, typical right after a driver upgrade.
    return [
        f"ERROR {_ts()} [core.py:1584] EngineCore failed to start.",
        "ERROR [core.py:1584] RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? Error 802: system not "
        "yet initialized",
        core_failed(),
    ]


# ---------------------------------------------------------------- loading the weights

# checkpoint size in GB (1e9 bytes): Kimi K3 is about 1.42-1.5 TB (docs/domain.md "Kimi K3 deployment shape")
MODEL_WEIGHTS_GB = {"moonshotai/Kimi-K3": 1500.0}
# CacheConfig.gpu_memory_utilization's default in vLLM 0.33 (vllm/config/cache.py)
GPU_MEMORY_UTILIZATION = 0.92


def weights_per_gpu_gib(opts: dict[str, Any]) -> float:
    """GiB of the model's weights on each GPU under the launch's layout: every tensor-parallel
    rank of every pipeline stage holds its share; data-parallel ranks each hold a whole copy,
    except the experts under ``--enable-expert-parallel``, which are spread over all of them
    (K3's weights are nearly all routed experts). 0 for a model of unknown size."""
    need_gb = MODEL_WEIGHTS_GB.get(str(opts.get("model")))
    if not need_gb:
        return 0.0
    tp, pp = int(opts.get("tensor_parallel_size", 1)), int(opts.get("pipeline_parallel_size", 1))
    dp = int(opts.get("data_parallel_size", 1)) if opts.get("enable_expert_parallel") else 1
    return need_gb * 1e9 / 2**30 / (tp * pp * dp)


def load_failure_logs(opts: dict[str, Any], gpu_mem_gib: float) -> list[str] | None:
    """The one fit rule of the simulated server, for a one-node launch and for every rank of a
    multi-node one: the weights' share of a GPU against that GPU. None when it fits. vLLM 0.33
    fails in one of two places:

    - the share is more than the GPU holds: PyTorch runs out of memory while the weights load,
      and vLLM names the cause before re-raising (``oom_logs``);
    - it loads, but leaves nothing of ``--gpu-memory-utilization`` x the GPU for the KV cache:
      the cache check raises "No available memory for the cache blocks"
      (vllm/v1/core/kv_cache_planning.py) and the engine core fails to start."""
    per_gpu = weights_per_gpu_gib(opts)
    util = float(opts.get("gpu_memory_utilization", GPU_MEMORY_UTILIZATION))
    if per_gpu <= gpu_mem_gib * util:
        return None
    if per_gpu > gpu_mem_gib:
        return oom_logs(gpu_mem_gib, allocated=per_gpu)
    return no_kv_memory_logs()


def oom_logs(gpu_mem_gib: float, allocated: float | None = None) -> list[str]:
    """PyTorch's CUDA OOM while loading weights; ``allocated``: GiB PyTorch had allocated
    (the weights' share of this GPU), capped at what the GPU holds."""
    total = gpu_mem_gib - 1.19
    alloc = 137.02 if allocated is None else min(allocated, total - 2.19)
    torch_oom = (f"CUDA out of memory. Tried to allocate 1.75 GiB. GPU 3 has a "
                 f"total capacity of {total:.2f} GiB of which 612.00 MiB is free. Process 41233 has {total - 0.6:.2f} GiB "
                 f"memory in use. Of the allocated memory {alloc:.2f} GiB is allocated by PyTorch, and 1.38 GiB is reserved "
                 "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
                 "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
    return [
        "NCCL INFO Bootstrap : Using eth0:10.0.0.11<0>",
        "NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.11<0>",
        "NCCL INFO Connected all rings",
        # vLLM 0.33 names the cause before re-raising PyTorch's error (load_model in
        # vllm/v1/worker/gpu_model_runner.py); the engine core logs the exception as it dies
        # (run_engine_core, vllm/v1/engine/core.py) and the API server gives up on it
        # (vllm/v1/engine/utils.py)
        f"ERROR {_ts()} [gpu_model_runner.py:5086] Failed to load model - not enough GPU memory. Try lowering "
        "--gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, or using "
        "--quantization. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips. "
        f"(original error: {torch_oom})",
        f"ERROR {_ts()} [core.py:1584] EngineCore failed to start.",
        f"ERROR [core.py:1584] torch.OutOfMemoryError: {torch_oom}",
        core_failed(),
    ]


def no_kv_memory_logs() -> list[str]:
    """The weights loaded but ``--gpu-memory-utilization`` of the GPU leaves no room for a
    single cache block (_check_enough_kv_cache_memory, vllm/v1/core/kv_cache_planning.py)."""
    return [
        f"INFO {_ts()} [default_loader.py:267] Loading weights took 412.31 seconds",
        f"ERROR {_ts()} [core.py:1584] EngineCore failed to start.",
        "ERROR [core.py:1584] Traceback (most recent call last):",
        'ERROR [core.py:1584]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_planning.py", '
        "line 57, in _check_enough_kv_cache_memory",
        "ERROR [core.py:1584]     raise ValueError(",
        "ERROR [core.py:1584] ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on "
        "the CPU backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
        "for more details.",
        core_failed(),
    ]


# ---------------------------------------------------------------- a running server

MAX_MODEL_LEN_DEFAULT = 1048576
# Kimi K3 thinks before it answers: its chat template opens the think channel unless the
# request's chat_template_kwargs say {"thinking": false} (or {"enable_thinking": false}), which
# the kimi_k3 reasoning parser honours too (vllm/reasoning/kimi_k3_reasoning_parser.py). The
# thinking tokens count against max_tokens; under --reasoning-parser the reply carries them as
# "reasoning" and content stays empty until the think channel closes. The simulated model
# thinks this many tokens, more than a 64-token answer budget leaves room for.
THINK_TOKENS = 96
THOUGHT = ("The", "user", "asks", "for", "this;", "I", "check", "what", "is", "needed", "first.")
KIMI_PARSERS = ("kimi_k2", "kimi_k3")
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


class Runtime:
    """What one server process holds in memory: its KV-block cache and its Prometheus counters.

    It starts empty with each (re)start of the container, as a real vLLM process does.
    """

    def __init__(self, config: dict[str, Any]):
        self.opts: dict[str, Any] = config["opts"]
        self.faults: list[str] = list(config.get("faults", []))
        self.instance: str = str(config.get("instance", ""))
        self.blocks: set[str] = set()
        self.running = 0
        self.waiting = 0
        self.c = {"queries": 0, "hits": 0, "prompt": 0, "gen": 0, "ok": 0, "aborted": 0}
        self.e2e: list[float] = []
        self.ttft: list[float] = []
        self.tool_streams = 0           # streamed replies that carried tool calls (empty_streamed_tool_calls)

    @property
    def served(self) -> str:
        return self.opts.get("served_model_name") or self.opts["model"]

    @property
    def caching(self) -> bool:
        # on by default in 0.33, Kimi K3 included: CacheConfig.enable_prefix_caching = True
        # (vllm/config/cache.py), and EngineArgs keeps the model's default, which is on for every
        # generative decoder (is_prefix_caching_supported in vllm/config/model.py,
        # _set_default_chunked_prefill_and_prefix_caching_args in vllm/engine/arg_utils.py);
        # --no-enable-prefix-caching turns it off
        return bool(self.opts.get("enable_prefix_caching", True))

    @property
    def k3(self) -> bool:
        return "kimi-k3" in str(self.opts["model"]).lower()

    def thinks(self, body: dict[str, Any]) -> bool:
        """Whether the model thinks before answering this request (K3 does unless told not to)."""
        if not self.k3:
            return False
        kw = body.get("chat_template_kwargs") or {}
        flag = kw.get("thinking") if isinstance(kw, dict) else None
        if flag is None and isinstance(kw, dict):
            flag = kw.get("enable_thinking", True)
        return bool(flag)

    @property
    def block(self) -> int:
        """Tokens per cached block. A hybrid model's attention block is sized so its page holds
        a mamba page, and --block-size only raises it (vllm/platforms/interface.py): K3's is
        1,536 tokens. The KV cache dtype enters that sum, but the published 1,536 does not say
        for which dtype, so the simulator keeps it for every one. Other models: --block-size,
        else vLLM's 16."""
        asked = max(0, int(self.opts.get("block_size") or 0))
        return max(asked, K3_BLOCK) if self.k3 else (asked or BLOCK)

    @property
    def max_num_seqs(self) -> int:
        return int(self.opts.get("max_num_seqs", 256))

    @property
    def max_model_len(self) -> int:
        return int(self.opts.get("max_model_len", MAX_MODEL_LEN_DEFAULT))

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.served, "object": "model", "created": int(time.time()),
                                            "owned_by": "vllm", "root": self.opts["model"], "parent": None,
                                            "max_model_len": self.max_model_len, "permission": []}]}


class Completion:
    """The outcome of one chat request, decided at admission; the server then paces it."""

    def __init__(self, rid: str, prompt: int, cached: int, message: dict[str, Any], finish: str, gen: int):
        self.rid, self.prompt, self.cached, self.message, self.finish, self.gen = rid, prompt, cached, message, \
            finish, gen


def _tokens(body: dict[str, Any]) -> list[str]:
    """The prompt's tokens as the chat template renders it. Words are not tokens: like a BPE
    vocabulary, the simulated tokenizer takes a word in pieces of up to TOKEN_CHARS characters
    ("cluster123" is 3 tokens), so a client that counts words undercounts."""
    parts: list[str] = []
    for m in body.get("messages", []):
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, list):
            c = " ".join(p.get("text", "") for p in c if isinstance(p, dict))
        parts.append(f"<|{m.get('role', 'user') if isinstance(m, dict) else 'user'}|> {c or ''}")
    if body.get("tools"):
        parts.append(json.dumps(body["tools"], sort_keys=True))
    return [w[i:i + TOKEN_CHARS] for w in " ".join(parts).split() for i in range(0, len(w), TOKEN_CHARS)]


@functools.lru_cache(maxsize=1 << 16)
def _token_id(tok: str) -> int:
    """A token's id in the simulated vocabulary: fixed by its text (a gate's 32k-token prompt
    repeats a few hundred words, so each is hashed once)."""
    return int(hashlib.md5(tok.encode()).hexdigest()[:5], 16)


def tokenize(rt: Runtime, body: Any) -> tuple[int, dict[str, Any]]:
    """POST /tokenize (vllm/entrypoints/serve/tokenize/): a chat request's ``messages`` (or a
    ``prompt``) rendered and counted with the served model's tokenizer; the reply is
    TokenizeResponse ``{"count", "max_model_len", "tokens", "token_strs"}`` (protocol.py there)."""
    if not isinstance(body, dict):
        return error(400, "BadRequestError", "Input should be a valid dictionary")
    if body.get("model") not in (rt.served, None):
        return error(404, "NotFoundError", f"The model `{body.get('model')}` does not exist. "
                     f"Valid aliases: {rt.served}.", param="model")
    if isinstance(body.get("messages"), list):
        toks = _tokens(body)
    elif isinstance(body.get("prompt"), str):
        toks = [w[i:i + TOKEN_CHARS] for w in body["prompt"].split() for i in range(0, len(w), TOKEN_CHARS)]
    else:
        return error(400, "BadRequestError", "Either `messages` or `prompt` is required")
    ids = [_token_id(t) for t in toks]
    return 200, {"count": len(ids), "max_model_len": rt.max_model_len, "tokens": ids,
                 "token_strs": toks if body.get("return_token_strs") else None}


def error_body(code: int, kind: str, msg: str, param: str | None = None) -> dict[str, Any]:
    """vLLM 0.33's ``ErrorResponse``: ``{"error": {"message", "type", "param", "code"}}``
    (vllm/entrypoints/serve/engine/protocol.py, built by create_error_response in
    vllm/entrypoints/serve/exception_handling/error_response.py)."""
    return {"error": {"message": msg, "type": kind, "param": param, "code": code}}


def error(code: int, kind: str, msg: str, param: str | None = None) -> tuple[int, dict[str, Any]]:
    return code, error_body(code, kind, msg, param)


def _example(schema: dict[str, Any]) -> Any:
    t = schema.get("type")
    if t == "object":
        props = schema.get("properties", {})
        req = schema.get("required", list(props))
        return {k: _example(props.get(k, {})) for k in req}
    if "enum" in schema:
        return schema["enum"][0]
    return {"string": "Beijing", "integer": 1, "number": 1.0, "boolean": True, "array": []}.get(t, "x")


def admit(rt: Runtime, body: Any) -> tuple[int, dict[str, Any]] | Completion:
    """Validate a chat request the way vLLM's OpenAI server does; on success, look up and
    fill the prefix cache (chained hashes of full KV blocks) and decide the reply."""
    if not isinstance(body, dict):
        return error(400, "BadRequestError", "Input should be a valid dictionary")
    if body.get("model") not in (rt.served, None):
        # _check_model in vllm/entrypoints/serve/engine/serving.py
        return error(404, "NotFoundError", f"The model `{body.get('model')}` does not exist. "
                     f"Valid aliases: {rt.served}.", param="model")
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return error(400, "BadRequestError", "messages: field required")
    tools = body.get("tools") or []
    choice = body.get("tool_choice", "auto" if tools else "none")
    opts = rt.opts
    if tools and choice == "auto" and not (opts.get("enable_auto_tool_choice") and opts.get("tool_call_parser")):
        return error(400, "BadRequestError",
                     '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')
    toks = _tokens(body)
    # vLLM 0.33's limits (vllm/renderers/params.py, TokenizeParams as the chat request builds it in
    # vllm/entrypoints/openai/chat_completion/protocol.py): an output budget over max_model_len and
    # a prompt over it are refused; otherwise max_tokens (default: the rest of the context) is
    # clamped to what the context has left (get_max_tokens, vllm/entrypoints/serve/utils/api_utils.py)
    param = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    asked = body.get(param)
    if asked is not None and int(asked) > rt.max_model_len:
        return error(400, "BadRequestError", f"{param}={int(asked)} cannot be greater than max_model_len="
                     f"{rt.max_model_len}. Please request fewer output tokens.")
    if len(toks) > rt.max_model_len:
        return error(400, "BadRequestError",
                     f"This model's maximum context length is {rt.max_model_len} tokens. However, your prompt "
                     f"contains {len(toks)} input tokens, which exceeds this limit even without any output tokens. "
                     "Please reduce the length of the input prompt.")
    max_tokens = rt.max_model_len - len(toks) if asked is None else min(int(asked), rt.max_model_len - len(toks))
    hashes, h, blk = [], "", rt.block
    for i in range(0, len(toks) - len(toks) % blk, blk):
        h = hashlib.sha256((h + "\x00" + " ".join(toks[i:i + blk])).encode()).hexdigest()[:16]
        hashes.append(h)
    cached = 0
    if rt.caching:
        matched = 0
        for hh in hashes:
            if hh not in rt.blocks:
                break
            matched += 1
        # K3 recomputes the last matched block rather than reuse it
        cached = (max(0, matched - 1) if rt.k3 else matched) * blk
        if "prefix_cache_miss" not in rt.faults:
            rt.blocks.update(hashes)
    rt.c["queries"] += len(toks)
    rt.c["hits"] += cached
    rt.c["prompt"] += len(toks)
    seed = f"{time.time()}-{rt.c['queries']}-{id(body)}"
    rid = f"chatcmpl-{hashlib.md5(seed.encode()).hexdigest()}"
    msg: dict[str, Any] = {"role": "assistant", "content": None, "reasoning": None, "tool_calls": []}
    finish = "stop"
    think = THINK_TOKENS if rt.thinks(body) else 0
    budget = max_tokens - think         # max_tokens counts the thinking tokens too
    # an agent loop: each tool result in the conversation answers one call; the model calls the
    # next tool it was given, and answers in text once every tool has answered
    answered = sum(1 for m in body["messages"] if isinstance(m, dict) and m.get("role") == "tool")
    if tools and choice != "none" and answered and answered >= len(tools):
        results = [str(m.get("content"))[:40] for m in body["messages"] if isinstance(m, dict) and m.get("role") == "tool"]
        msg["content"] = "Done. " + "; ".join(results)
        gen = 16
    elif tools and choice != "none":
        nxt = tools[min(answered, len(tools) - 1)]
        fn = nxt.get("function", {}) if isinstance(nxt, dict) else {}
        args = json.dumps(_example(fn.get("parameters", {"type": "object"})))
        if opts.get("tool_call_parser") in KIMI_PARSERS or "kimi" not in str(opts["model"]).lower():
            msg["tool_calls"] = [{"id": f"chatcmpl-tool-{rid[-24:]}", "type": "function",
                                  "function": {"name": fn.get("name", ""), "arguments": args}}]
            finish = "tool_calls"
        else:
            # a parser that does not know Kimi's tool-call tokens leaves them in the text:
            # the "empty tool call" users report, a 200 reply with no tool_calls entry
            msg["content"] = (f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{fn.get('name', '')}:0"
                              f"<|tool_call_argument_begin|>{args}<|tool_call_end|><|tool_calls_section_end|>")
        gen = 24
    elif isinstance(body.get("response_format"), dict) and body["response_format"].get("type") == "json_schema":
        schema = body["response_format"].get("json_schema", {}).get("schema", {})
        msg["content"] = json.dumps(_example(schema))
        gen = 16
    else:
        # one word per decoded token, stopping at max_tokens ("length") or after 32 ("stop")
        gen = max(0, min(32, budget))
        words = ("Hello.", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
        msg["content"] = " ".join(words[i % len(words)] for i in range(gen)) or None
        finish = "length" if budget <= 32 else "stop"
    if think:
        thought = " ".join(THOUGHT[i % len(THOUGHT)] for i in range(min(think, max_tokens)))
        if gen > budget:
            # the budget ran out before the answer was whole: the parsers hold back an
            # unfinished tool call, JSON or text is cut where the tokens ran out
            cut = max(0, budget)
            if msg["tool_calls"] or cut == 0:
                msg["content"], msg["tool_calls"] = None, []
            else:
                msg["content"] = (msg["content"] or "")[:cut * 4] or None
            gen, finish = cut, "length"
        if opts.get("reasoning_parser"):
            msg["reasoning"] = thought
        else:
            # without a reasoning parser the think channel stays in the text
            msg["content"] = f"<|open|>think<|sep|>{thought}<|close|>think<|sep|>" + (msg["content"] or "")
        gen += min(think, max_tokens)
    return Completion(rid, len(toks), cached, msg, finish, gen)


def _usage(comp: Completion) -> dict[str, Any]:
    return {"prompt_tokens": comp.prompt, "total_tokens": comp.prompt + comp.gen, "completion_tokens": comp.gen,
            "prompt_tokens_details": {"cached_tokens": comp.cached} if comp.cached else None}


def chat_message(msg: dict[str, Any]) -> dict[str, Any]:
    """vLLM 0.33's ChatMessage as serialised: ``tool_calls`` only when there are some, the
    thinking as ``reasoning`` (vllm/entrypoints/openai/chat_completion/protocol.py)."""
    out = {"role": msg["role"], "content": msg["content"], "refusal": None, "annotations": None, "audio": None,
           "function_call": None, "tool_calls": msg["tool_calls"], "reasoning": msg["reasoning"]}
    if not out["tool_calls"]:
        del out["tool_calls"]
    return out


def response(rt: Runtime, comp: Completion) -> dict[str, Any]:
    return {"id": comp.rid, "object": "chat.completion", "created": int(time.time()), "model": rt.served,
            "choices": [{"index": 0, "message": chat_message(comp.message), "logprobs": None, "finish_reason": comp.finish,
                         "stop_reason": None}],
            "usage": _usage(comp), "prompt_logprobs": None, "kv_transfer_params": None}


def stream_chunks(rt: Runtime, comp: Completion, include_usage: bool) -> list[dict[str, Any]]:
    """The server-sent events of a streamed reply, in vLLM's chunk format (without [DONE])."""
    base = {"id": comp.rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": rt.served}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    msg = comp.message
    for piece in re.findall(r"\s*\S+", msg["reasoning"] or ""):
        out.append(chunk({"reasoning": piece}))
    empty = False
    if msg["tool_calls"]:
        rt.tool_streams += 1
        # vllm#53246, #54273: a streamed Kimi tool call comes back with finish_reason
        # "tool_calls" and no call in any delta (with the fault: every second one)
        empty = "empty_streamed_tool_calls" in rt.faults and rt.tool_streams % 2 == 0
    if empty:
        pass
    elif msg["tool_calls"]:
        for i, call in enumerate(msg["tool_calls"]):
            out.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                              "function": {"name": call["function"]["name"], "arguments": ""}}]}))
            args = call["function"]["arguments"]
            for j in range(0, len(args), 8):
                out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": args[j:j + 8]}}]}))
    else:
        text = msg["content"] or ""
        for piece in re.findall(r"\s*\S+", text):
            out.append(chunk({"content": piece}))
    if "stream_fails_midway" in rt.faults:
        # the engine fails the request after some tokens went out: the 200 stream carries the
        # error as an event, then [DONE] (GenerationError -> create_error_response in
        # vllm/entrypoints/openai/chat_completion/serving.py)
        return out[:max(2, len(out) // 2)] + [error_body(500, "InternalServerError", "Internal server error")]
    out.append(chunk({}, comp.finish))
    if include_usage:
        out.append({**base, "choices": [], "usage": _usage(comp)})
    return out


def _histogram(out: list[str], name: str, lab: str, values: list[float], buckets: tuple[float, ...]) -> None:
    for le in buckets:
        out.append(f'{name}_bucket{{{lab},le="{le}"}} {float(sum(1 for x in values if x <= le))}')
    out.append(f'{name}_bucket{{{lab},le="+Inf"}} {float(len(values))}')
    out.append(f"{name}_count{{{lab}}} {float(len(values))}")
    out.append(f"{name}_sum{{{lab}}} {float(sum(values))}")


def cache_config_info(rt: Runtime) -> str:
    """``vllm:cache_config_info``: a gauge at 1 whose labels are CacheConfig's fields as strings
    (log_metrics_info in vllm/v1/metrics/loggers.py, metrics_info in vllm/config/cache.py); a
    subset of them here. mamba_block_size follows block_size under mamba_cache_mode "align"
    (vllm/platforms/interface.py); cache_hit_alignment_tokens is set only after the engine's KV
    cache is built, so the API server's copy shows None."""
    on = rt.caching
    labels = {"block_size": rt.block, "cache_dtype": rt.opts.get("kv_cache_dtype", "auto"),
              "cache_hit_alignment_tokens": None, "enable_prefix_caching": on,
              "gpu_memory_utilization": float(rt.opts.get("gpu_memory_utilization", 0.92)),
              "mamba_block_size": rt.block if rt.k3 and on else None,
              "mamba_cache_mode": "align" if rt.k3 and on else "none", "num_gpu_blocks": 1036288 // rt.block,
              "prefix_caching_hash_algo": "sha256", "engine": "0"}
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return ("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            f"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{{{text}}} 1.0\n")


def metrics(rt: Runtime) -> str:
    if rt.opts.get("disable_log_stats"):
        # --disable-log-stats: the engine keeps no stats, /metrics has no vllm:* families
        return ("# HELP python_gc_objects_collected_total Objects collected during gc\n"
                "# TYPE python_gc_objects_collected_total counter\n"
                'python_gc_objects_collected_total{generation="0"} 18211.0\n'
                "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
                "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 2.1372928e+09\n")
    c = rt.c
    lab = f'engine="0",model_name="{rt.served}"'
    out = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} {float(rt.running)}",
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} {float(rt.waiting)}",
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{lab}}} {min(1.0, len(rt.blocks) * rt.block / 1036288):.6f}",
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
        "# TYPE vllm:prefix_cache_queries_total counter",
        f"vllm:prefix_cache_queries_total{{{lab}}} {float(c['queries'])}",
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
        "# TYPE vllm:prefix_cache_hits_total counter", f"vllm:prefix_cache_hits_total{{{lab}}} {float(c['hits'])}",
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE vllm:prompt_tokens_total counter", f"vllm:prompt_tokens_total{{{lab}}} {float(c['prompt'])}",
        "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
        "# TYPE vllm:generation_tokens_total counter", f"vllm:generation_tokens_total{{{lab}}} {float(c['gen'])}",
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{{lab},finished_reason="stop"}} {float(c["ok"])}',
        f'vllm:request_success_total{{{lab},finished_reason="abort"}} {float(c["aborted"])}',
        "# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.",
        "# TYPE vllm:e2e_request_latency_seconds histogram",
    ]
    _histogram(out, "vllm:e2e_request_latency_seconds", lab, rt.e2e, LATENCY_BUCKETS)
    out += ["# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
            "# TYPE vllm:time_to_first_token_seconds histogram"]
    _histogram(out, "vllm:time_to_first_token_seconds", lab, rt.ttft, TTFT_BUCKETS)
    return cache_config_info(rt) + "\n".join(out) + "\n"
