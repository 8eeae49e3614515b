"""Stage kind -> implementation."""

from k3rollout.stages import baseline, cordon, cuda_check, driver_upgrade, features, multinode, uncordon, vllm_smoke

STAGES = {
    "baseline": baseline.run, "cordon": cordon.run, "driver_upgrade": driver_upgrade.run,
    "cuda_check": cuda_check.run, "vllm_smoke": vllm_smoke.run, "features": features.run,
    "multinode": multinode.run, "uncordon": uncordon.run,
}
