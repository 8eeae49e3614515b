"""CUDA toolkit -> minimum NVIDIA Linux driver, and image -> CUDA version.

Source: NVIDIA CUDA Toolkit Release Notes, Table 2 ("minor version compatibility") and
Table 3 ("CUDA Toolkit and Corresponding Driver Versions"), Linux x86_64 column (docs/domain.md,
"CUDA toolkit and driver versions"). Two minimums exist and both are kept:

- ``FAMILY_FLOOR``: with minor-version compatibility, any 13.x app runs on a >= 580
  driver, any 12.x app on >= 525. Below the floor the CUDA runtime cannot initialise:
  this is what decides ``driver_incompatible``.
- ``TOOLKIT_DRIVER``: the driver shipped with (and fully supporting) each release; below
  it, newer toolkit features may be missing. That is a warning, not a refusal.
"""

from __future__ import annotations

import re
from typing import TypedDict

FAMILY_FLOOR = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}

TOOLKIT_DRIVER = {
    "11.0": "450.51.05", "11.1": "455.23", "11.2": "460.27.03", "11.3": "465.19.01", "11.4": "470.42.01",
    "11.5": "495.29.05", "11.6": "510.39.01", "11.7": "515.43.04", "11.8": "520.61.05",
    "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03", "12.3": "545.23.06", "12.4": "550.54.14",
    "12.5": "555.42.02", "12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03",
    "13.0": "580.65.06", "13.1": "590.44.01", "13.2": "595.45.04",
}

# The CUDA version each driver branch reports in nvidia-smi (its newest supported CUDA).
BRANCH_MAX_CUDA = {450: "11.0", 455: "11.1", 460: "11.2", 465: "11.3", 470: "11.4", 495: "11.5", 510: "11.6",
                   515: "11.7", 520: "11.8", 525: "12.0", 530: "12.1", 535: "12.2", 545: "12.3", 550: "12.4",
                   555: "12.5", 560: "12.6", 570: "12.8", 575: "12.9", 580: "13.0", 590: "13.1", 595: "13.2"}


def vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def cuda_major_minor(cuda: str) -> str:
    parts = vtuple(cuda)
    if len(parts) < 2:
        raise ValueError(f"not a CUDA version: {cuda!r}")
    return f"{parts[0]}.{parts[1]}"


def family_floor(cuda: str) -> str:
    major = vtuple(cuda)[0]
    if major not in FAMILY_FLOOR:
        raise ValueError(f"no NVIDIA driver floor known for CUDA {cuda}")
    return FAMILY_FLOOR[major]


def min_branch(cuda: str) -> int:
    return vtuple(family_floor(cuda))[0]


def driver_supports(driver: str, cuda: str) -> bool:
    """True if ``driver`` (e.g. 575.57.08) can initialise a CUDA ``cuda`` (e.g. 13.0.1) runtime."""
    return vtuple(driver) >= vtuple(family_floor(cuda))


class CompatVerdict(TypedDict):
    driver: str
    cuda: str
    family_floor: str
    toolkit_driver: str | None
    compatible: bool
    reason: str


def compat_verdict(driver: str, cuda: str) -> CompatVerdict:
    mm = cuda_major_minor(cuda)
    floor = family_floor(cuda)
    full = TOOLKIT_DRIVER.get(mm)
    ok = vtuple(driver) >= vtuple(floor)
    out: CompatVerdict = {"driver": driver, "cuda": cuda, "family_floor": floor, "toolkit_driver": full,
                          "compatible": ok, "reason": ""}
    if not ok:
        out["reason"] = (f"driver {driver} (branch r{vtuple(driver)[0]}) is below the CUDA {vtuple(cuda)[0]}.x "
                         f"minimum {floor} (r{vtuple(floor)[0]}): a CUDA {mm} image cannot initialise CUDA here. "
                         f"Upgrade the host driver to r{vtuple(floor)[0]} or newer; rebuilding the image for an older "
                         "CUDA is a stop-gap, not an official path.")
    elif full and vtuple(driver) < vtuple(full):
        out["reason"] = (f"driver {driver} runs CUDA {mm} through minor-version compatibility; the toolkit's own "
                         f"driver is {full}, some newer features may be unavailable")
    return out


def image_cuda(env: list[str] | dict[str, str]) -> str | None:
    """CUDA version of an image from ``docker image inspect`` Config.Env (nvidia/cuda base images)."""
    items = env.items() if isinstance(env, dict) else (e.partition("=")[::2] for e in env)
    kv = {k: v for k, v in items}
    if kv.get("CUDA_VERSION"):
        return kv["CUDA_VERSION"]
    m = re.search(r"cuda>=(\d+\.\d+)", kv.get("NVIDIA_REQUIRE_CUDA", ""))
    return m.group(1) if m else None
