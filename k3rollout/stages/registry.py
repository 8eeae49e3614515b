"""Stage kind -> implementation."""

from k3rollout.stages import baseline, cordon, cuda_check, driver_upgrade, features, multinode, uncordon, vllm_smoke
from k3rollout.stages.base import NodeCtx, StageOutcome


def _driver_upgrade(ctx: NodeCtx) -> StageOutcome:
    out = driver_upgrade.run(ctx)
    if out.passed:
        ctx.publish_progress("validation-required")
    return out


STAGES = {
    "baseline": baseline.run, "cordon": cordon.run, "driver_upgrade": _driver_upgrade,
    "cuda_check": cuda_check.run, "vllm_smoke": vllm_smoke.run, "features": features.run,
    "multinode": multinode.run, "uncordon": uncordon.run,
}
