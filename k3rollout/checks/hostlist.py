"""Slurm host lists: ``gpu-[01-02,05]`` and the hosts it names, both ways, as
``scontrol show hostnames`` expands and Slurm's commands print them (``squeue -o %N``,
``SLURM_JOB_NODELIST``). Pure text."""

from __future__ import annotations

import re


def expand(nodelist: str) -> list[str]:
    """``gpu-[01-02,05],login1`` -> the hosts, as ``scontrol show hostnames`` prints them."""
    hosts: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?([^,]*)", nodelist):
        pre, ranges, post = m.group(1), m.group(2), m.group(3)
        if not pre and not ranges:
            continue
        if ranges is None:
            hosts.append(pre + post)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            for n in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{pre}{n:0{len(lo)}d}{post}")
    return hosts


def compress(hosts: list[str]) -> str:
    """``gpu-01,gpu-02,gpu-05`` -> ``gpu-[01-02,05]``, as Slurm prints a node list."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for h in hosts:
        m = re.fullmatch(r"(.*?)(\d+)", h)
        if m:
            groups.setdefault((m.group(1), len(m.group(2))), []).append(int(m.group(2)))
        else:
            plain.append(h)
    out = list(plain)
    for (pre, width), nums in groups.items():
        if len(nums) == 1:
            out.append(f"{pre}{nums[0]:0{width}d}")
            continue
        runs: list[list[int]] = []
        for n in sorted(nums):
            if runs and n == runs[-1][1] + 1:
                runs[-1][1] = n
            else:
                runs.append([n, n])
        out.append(pre + "[" + ",".join(f"{a:0{width}d}" + (f"-{b:0{width}d}" if b != a else "")
                                        for a, b in runs) + "]")
    return ",".join(out)
