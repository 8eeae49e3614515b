"""Stage 4: after the reboot, prove GPU visibility, container start and CUDA init.

Before launching anything the compatibility table decides: a CUDA 13 image on a driver
below r580 is refused with the reason (``driver_incompatible``), not attempted.
"""

from __future__ import annotations

import re
from typing import Any

from k3rollout.checks.cuda_table import compat_verdict
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.spec import StageSpec, kind
from k3rollout.transport.base import CommandResult

TORCH_INIT = ("import torch; torch.cuda.init(); "
              "print(f'cuda_available={torch.cuda.is_available()} device_count={torch.cuda.device_count()}')")


def ensure_image(ctx: NodeCtx, image: str) -> tuple[dict[str, Any] | None, str]:
    facts = ctx.image_facts(image)
    if facts is None:
        pull = ctx.workload.pull(ctx, image)
        if not pull.ok:
            return None, pull.stdout + pull.stderr
        facts = ctx.image_facts(image, "image-inspect-after-pull")
    return facts, ""


def not_started(ctx: NodeCtx, res: CommandResult) -> str:
    """``: <why>`` when the runtime says its job never started (a Slurm job left without its
    node: Slurm's own reason), else ''."""
    why = getattr(ctx.workload, "not_started", None)
    text = why(res) if why is not None and not res.ok else ""
    return f": {text}" if text else ""


def run(ctx: NodeCtx) -> StageOutcome:
    image = ctx.params.image
    ready, why, seen = ctx.workload.after_driver(ctx, ctx.params.gpu_ready_timeout)
    if not ready:
        return StageOutcome(False, why, seen, why)
    img, logs = ensure_image(ctx, image)
    if img is None:
        return StageOutcome(False, f"image {image} cannot be pulled", {}, logs)
    f = {**seen, "image": image, "image_digest": img["digest"], "image_cuda": img["cuda"],
         "image_vllm_version": img["vllm_version"]}
    driver = ctx.facts.get("driver_version")
    if img["cuda"] and driver:
        verdict = compat_verdict(driver, img["cuda"])
        f["compat"] = verdict
        if not verdict["compatible"]:
            return StageOutcome(False, verdict["reason"], f, verdict["reason"])
    smi = ctx.workload.run_check(ctx, "container-nvidia-smi", image, "nvidia-smi", ["-L"])
    f["container_gpu_count"] = len([ln for ln in smi.stdout.splitlines() if ln.startswith("GPU ")])
    if not smi.ok:
        return StageOutcome(False, f"GPUs not visible in a container (rc {smi.rc}){not_started(ctx, smi)}", f, smi.stdout + smi.stderr)
    init = ctx.workload.run_check(ctx, "cuda-init", image, "python3", ["-c", TORCH_INIT])
    m = re.search(r"device_count=(\d+)", init.stdout)
    f["cuda_init_ok"] = init.ok and m is not None
    f["cuda_device_count"] = int(m.group(1)) if m else 0
    if not f["cuda_init_ok"]:
        return StageOutcome(False, f"CUDA init failed in {image} (rc {init.rc}){not_started(ctx, init)}", f, init.stdout + init.stderr)
    return StageOutcome(True, "", f)


SPEC = StageSpec(kind("cuda_check"), run=run)
