"""``scheduler: none``: nodes no scheduler places work on; nothing to cordon or restore."""

from __future__ import annotations

from k3rollout.scheduler.base import NodeCtx


class NoScheduler:
    kind = "none"

    def where(self, ctx: NodeCtx) -> str | None:
        return None

    def read_state(self, ctx: NodeCtx) -> str:
        return "unmanaged"

    def idle(self, ctx: NodeCtx) -> tuple[bool, str]:
        return False, "no scheduler: nothing shows whether work runs there"

    def cordon(self, ctx: NodeCtx) -> tuple[bool, str, str]:
        return True, "scheduler 'none': nothing to cordon", ""

    def uncordon(self, ctx: NodeCtx, name: str) -> tuple[bool, str]:
        return True, "scheduler 'none'"

    def label(self, ctx: NodeCtx, name: str, key: str, value: str) -> tuple[bool, str]:
        return True, "scheduler 'none': no labels"

    def quarantine(self, ctx: NodeCtx, label: str) -> tuple[bool, str]:
        return True, "no scheduler: node left as the rollback left it, marked quarantined in the journal"

    def describe_quarantine(self, label: str) -> str:
        return "no scheduler"
