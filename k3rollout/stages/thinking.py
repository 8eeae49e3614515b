"""What each gate request does with a reasoning model's thinking.

Kimi K3 thinks before it answers. Under ``--reasoning-parser kimi_k3`` the reply carries the
thinking as ``reasoning`` and ``content`` stays empty until the think channel closes, and
``max_tokens`` counts the thinking tokens too, so a small budget can end a healthy reply
before its answer. Every gate request therefore says what it does:

- ``off(body)``: instruct mode, ``chat_template_kwargs: {"thinking": false}``; the kimi_k3
  reasoning parser then hands every token to ``content`` (it also takes
  ``enable_thinking``; vllm/reasoning/kimi_k3_reasoning_parser.py). Used where a small
  budget checks the answer (the short request, the context step, the prefix-cache proof,
  tool calls, structured output, vision, observe). Other models' templates ignore the key.
- ``on(body, max_tokens)``: thinking as the server serves it, with a budget sized for the
  thinking and the answer; the gate reads ``message.reasoning`` (the load ladder's
  concurrency levels, the agent flow, which run the model as agents do).
"""

from __future__ import annotations

from typing import Any


def off(body: dict[str, Any]) -> dict[str, Any]:
    """The request in instruct mode (no think channel)."""
    return {**body, "chat_template_kwargs": {**(body.get("chat_template_kwargs") or {}), "thinking": False}}


def on(body: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """The request with thinking as served, and ``max_tokens`` sized for thinking plus answer."""
    return {**body, "max_tokens": max_tokens}
