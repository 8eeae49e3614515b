"""nccl-tests ``all_reduce_perf``, alone or under ``mpirun -H a:8,b:8``, on the simulated cluster.

Peers are the sibling state directories named in ``-H``; a peer that is down, missing or
carries the ``nccl_broken`` fault breaks the collective with NCCL's real WARN lines. A peer
with the ``rdma_missing`` fault has no usable IB/RoCE device: the collective still works,
over TCP sockets at a fraction of the bandwidth, and only NCCL's INFO log
(``mpirun -x NCCL_DEBUG=INFO``) says so.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from k3sim import state as st

Out = tuple[int, str, str]


def _size(text: str) -> int:
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3}
    t = text.upper()
    return int(t[:-1]) * mult[t[-1]] if t[-1] in mult else int(t)


def _opts(args: list[str]) -> dict[str, str]:
    out, i = {}, 0
    while i < len(args):
        if args[i].startswith("-") and i + 1 < len(args):
            out[args[i]] = args[i + 1]
            i += 2
        else:
            i += 1
    return out


def _table(hosts: list[tuple[str, int]], gpu: str, min_b: int, max_b: int, factor: int, peak: float) -> str:
    ngpus = sum(n for _, n in hosts)
    lines = [f"# nThread 1 nGpus {1 if len(hosts) > 1 else ngpus} minBytes {min_b} maxBytes {max_b} step: {factor}"
             f"(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    rank = 0
    for h, n in hosts:
        for d in range(n):
            lines.append(f"#  Rank {rank:>2} Group  0 Pid  {41230 + rank:>5} on {h:>10} device  {d} [0x{0x18 + d:02x}] {gpu}")
            rank += 1
    lines += ["#", "#                                                              out-of-place                       in-place          ",
              "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
              "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       "]
    size, busbws = min_b, []
    factor_bus = 2 * (ngpus - 1) / ngpus
    while size <= max_b:
        # latency-bound at small sizes, saturating towards ``peak`` at large ones
        t_us = 30.0 + size / (peak / factor_bus * 1e3) * (1 + 2**20 / (size + 2**20))
        alg = size / t_us / 1e3
        bus = alg * factor_bus
        busbws.append(bus)
        lines.append(f"{size:>12}  {size // 4:>12}     float     sum      -1  {t_us:>7.2f}  {alg:>6.2f}  {bus:>6.2f}"
                     f"      0  {t_us * 0.998:>7.2f}  {alg * 1.002:>6.2f}  {bus * 1.002:>6.2f}      0")
        size *= factor
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.3f} ", "#", ""]
    return "\n".join(lines)


def _net_info(hosts: list[tuple[str, int]], peers: dict[str, dict[str, Any]]) -> tuple[list[str], bool]:
    """NCCL's INFO lines about the inter-node network (NCCL_DEBUG=INFO), and whether the job
    fell back to sockets. A host without a usable RDMA device logs ``NET/IB : No device found.``
    and NCCL uses TCP sockets for the whole communicator: ``Using network Socket``, GPUDirect
    RDMA disabled (NVIDIA/nccl issues #226, #952, #1053)."""
    socket = any("rdma_missing" in peers[h]["faults"] for h, _ in hosts)
    lines = []
    for i, (h, _) in enumerate(hosts):
        pid, ip = 41230 + i, f"10.0.1.{11 + i}"
        pre = f"{h}:{pid}:{pid} [0] NCCL INFO "
        lines.append(pre + f"Bootstrap : Using ibp26s0:{ip}<0>")
        if "rdma_missing" in peers[h]["faults"]:
            lines.append(pre + "NET/IB : No device found.")
        else:
            lines.append(pre + f"NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [2]mlx5_4:1/IB [3]mlx5_5:1/IB ; "
                               f"OOB ibp26s0:{ip}<0>")
        if socket:
            lines += [pre + f"NET/Socket : Using [0]eth0:192.168.0.{11 + i}<0>", pre + "Using network Socket",
                      pre + "NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'"]
        else:
            lines += [pre + "Using network IB",
                      f"{h}:{pid}:{pid + 90} [0] NCCL INFO Channel 00/0 : {8 * i}[0] -> "
                      f"{8 * ((i + 1) % len(hosts))}[0] [send] via NET/IB/0/GDRDMA"]
    return lines, socket


def all_reduce_perf(state_dir: Path, state: dict[str, Any], args: list[str], hosts: list[tuple[str, int]] | None,
                    env: dict[str, str] | None = None) -> Out:
    o = _opts(args)
    try:
        min_b, max_b = _size(o.get("-b", "8")), _size(o.get("-e", "128M"))
        factor = int(o.get("-f", "2"))
        g = int(o.get("-g", "1"))
    except (ValueError, KeyError):
        return 1, "", "Invalid size or option for all_reduce_perf\n"
    if factor < 2 or min_b <= 0 or max_b < min_b:
        return 1, "", "Invalid size range\n"
    if hosts is None:
        if g > state["gpu"]["count"]:
            return 1, "", f"{state['name']}: Test CUDA failure common.cu:1087 'invalid device ordinal'\n"
        hosts = [(state["name"], g)]
    broken = []
    peers: dict[str, dict[str, Any]] = {}
    for h, _ in hosts:
        if h == state["name"]:
            peer = state
        else:
            pdir = state_dir.parent / h
            if not (pdir / "state.json").exists():
                broken.append((h, "unknown host"))
                continue
            peer = st.load(pdir)
        peers[h] = peer
        if not st.is_up(peer, time.time()):
            broken.append((h, "down"))
        elif "nccl_broken" in peer["faults"] and len(hosts) > 1:
            # the fault is in the inter-node fabric (IB/RoCE); NVLink inside one node still works
            broken.append((h, "nccl"))
        elif not peer["loaded_driver"]:
            broken.append((h, "nodriver"))
    if broken:
        me = state["name"]
        h, why = broken[0]
        err = [f"{me}:41230:41301 [0] NCCL INFO Bootstrap : Using ibp26s0:10.0.1.11<0>",
               f"{me}:41230:41301 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB ibp26s0:10.0.1.11<0>"]
        if why == "nccl":
            err += [f"{h}:41230:41312 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
                    "10.0.1.12<47120> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.1.11 "
                    "remoteGids::ffff:10.0.1.12",
                    f"{h}:41230:41312 [0] NCCL INFO transport/net.cc:1300 -> 6",
                    f"{me}: Test NCCL failure common.cu:1005 'remote process exited or there was a network error / "
                    "NET/IB : Got completion from peer with status=12'"]
        else:
            err += [f"{me}:41230:41301 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
                    f"{h}<41877> failed : Software caused connection abort",
                    f"{me}:41230:41301 [0] NCCL INFO misc/socket.cc:565 -> 2",
                    f"{me}: Test NCCL failure common.cu:1005 'unhandled system error (run with NCCL_DEBUG=INFO for "
                    "details) / '"]
        err += [f" .. {me} pid 41230: Test failure common.cu:891",
                "--------------------------------------------------------------------------",
                "Primary job  terminated normally, but 1 process returned", "a non-zero exit code. Per user-direction, "
                "the job has been aborted.", "--------------------------------------------------------------------------"]
        return 1, "", "\n".join(err) + "\n"
    peak = 478.0 if len(hosts) == 1 else 362.0
    info: list[str] = []
    if len(hosts) > 1:
        lines, socket = _net_info(hosts, peers)
        if socket:
            peak = 11.0         # TCP over the 100 GbE management network, not 4 x 400G RDMA
        if (env or {}).get("NCCL_DEBUG", "").upper() in ("INFO", "TRACE"):
            info = lines
    table = _table(hosts, state["gpu"]["model"], min_b, max_b, factor, peak)
    return 0, "\n".join(info + [table]) if info else table, ""


def mpirun(state_dir: Path, state: dict[str, Any], args: list[str]) -> Out:
    hosts: list[tuple[str, int]] = []
    env: dict[str, str] = {}
    i = 0
    prog_at = None
    while i < len(args):
        a = args[i]
        if a in ("-H", "--host"):
            for item in args[i + 1].split(","):
                h, _, n = item.partition(":")
                hosts.append((h, int(n or 1)))
            i += 2
        elif a == "-x" and i + 1 < len(args):
            k, _, v = args[i + 1].partition("=")
            env[k] = v
            i += 2
        elif a in ("-np", "-n", "--mca", "--map-by", "--bind-to"):
            i += 3 if a == "--mca" else 2
        elif a.startswith("-"):
            i += 1
        else:
            prog_at = i
            break
    if prog_at is None or not args[prog_at].endswith("all_reduce_perf"):
        return 1, "", "mpirun was unable to find the specified executable file\n"
    return all_reduce_perf(state_dir, state, args[prog_at + 1:], hosts or None, env)
