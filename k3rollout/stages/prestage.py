"""Pre-staging: what a node's window needs, done while it still serves (before its cordon).

Nothing here installs, stops, cordons or restarts anything:
- disk space: ``df`` on the package cache and Docker's data root, against ``min_free_gib``;
- the driver, as the node's driver backend stages it (stages/driver): for host packages the
  exact install the driver stage will run (``driver_node.resolve_target``: versions the
  node's own repositories offer), fetched with ``apt-get install --download-only`` into
  ``/var/cache/apt/archives`` and listed (name and size of each staged .deb); on RHEL the
  target's DNF module stream is enabled only in the window (it changes what dnf
  resolves), so the packages are fetched there, and pre-staging says so; the GPU
  Operator's driver comes in its container image, and nothing is fetched;
- the image, pulled by digest (``prestage.image_digest`` or the var ``vllm_image_digest``;
  by tag otherwise, recording the digest it resolved);
- the model weights where ``prestage.weights_manifest`` says they live (local cache or shared
  storage): ``sha256sum --check`` of that manifest, a check in place, not a download.

The facts recorded (``facts.prestage``) let the driver stage check, in the window, that the
staged packages are still there as staged (``staged_intact``, stages/driver/host.py).
"""

from __future__ import annotations

from typing import Any

from k3rollout.stages import driver_node as dn
from k3rollout.stages.base import NodeCtx, StageOutcome
from k3rollout.stages.driver import driver_backend_for
from k3rollout.stages.driver.host import ARCHIVES
from k3rollout.transport.base import CommandResult
from k3rollout.workload import workload_for


def parse_df(text: str) -> dict[str, int]:
    """``df -B1 --output=target,avail``: mount point -> bytes available."""
    out = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 2 and parts[-1].isdigit():
            out[parts[0]] = int(parts[-1])
    return out


def run(ctx: NodeCtx, cfg: Any) -> StageOutcome:
    def step(name: str, argv: list[str]) -> CommandResult:
        return ctx.step(name, argv)

    facts: dict[str, Any] = {}
    osf = dn.read_os(step)
    mgr = osf["pkg_mgr"]
    cache_dir = ARCHIVES if mgr == "apt" else "/var/cache/dnf"
    wl = workload_for(ctx.vars)
    res = step("disk-free", ["df", "-B1", "--output=target,avail", cache_dir, wl.image_store(step, ctx.vars)])
    if not res.ok:
        return StageOutcome(False, f"df failed (rc {res.rc}): {res.tail(200)}", logs=res.stderr)
    free = parse_df(res.stdout)
    facts["disk_free_bytes"] = free
    need = int(cfg.min_free_gib * 1024 ** 3)
    short = {m: b for m, b in free.items() if b < need}
    if short or not free:
        return StageOutcome(False, "not enough disk space to stage: " + ", ".join(
            f"{m} has {b / 1024 ** 3:.0f} GiB free, {cfg.min_free_gib:g} GiB needed" for m, b in short.items()),
            {"prestage": facts})

    # the driver's part is its backend's: host packages downloaded, or nothing to fetch
    staged = driver_backend_for(ctx.vars).prestage(step, ctx, osf, facts)
    if staged is not None:
        return staged

    image = str(ctx.vars.get("vllm_image") or "")
    digest = cfg.image_digest or ctx.vars.get("vllm_image_digest")
    if image:
        ref = f"{image.rsplit(':', 1)[0] if ':' in image.split('/')[-1] else image}@{digest}" if digest else image
        pulled = wl.pull_pinned(step, ref)
        if not pulled.ok:
            return StageOutcome(False, f"{wl.pull_command()} {ref} failed: {pulled.detail}", {"prestage": facts},
                                logs=pulled.logs)
        if digest and pulled.digest != digest:
            return StageOutcome(False, f"{wl.pull_command()} {ref} gave digest {pulled.digest}, not {digest}",
                                {"prestage": facts})
        facts.update(image=ref, image_digest=pulled.digest)

    if cfg.weights_manifest:
        res = step("weights-manifest", ["sha256sum", "--check", "--strict", "--quiet", cfg.weights_manifest])
        facts["weights_manifest"] = cfg.weights_manifest
        if not res.ok:
            return StageOutcome(False, f"model weights do not match {cfg.weights_manifest}: "
                                f"{(res.stdout + res.stderr).strip()[-300:]}", {"prestage": facts},
                                logs=res.stdout + res.stderr)
        facts["weights_verified"] = True
    return StageOutcome(True, "", {"prestage": facts})
