"""How k3rollout reaches hosts. Stages see only the ``Executor`` protocol in ``base``."""

from k3rollout.transport.base import CommandResult, Executor

__all__ = ["CommandResult", "Executor"]
