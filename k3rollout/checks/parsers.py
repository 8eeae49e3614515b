"""Parsers for the facts the stages read. Each ``*_ARGV`` is the command; each function is pure.

Formats: nvidia-smi (plain table and ``--query-gpu`` CSV), /proc/driver/nvidia/version,
dpkg-query / rpm package lists, docker info / image inspect / inspect JSON, scheduler
state (kubectl, scontrol), nccl-tests ``all_reduce_perf`` tables, and vLLM's Prometheus
``/metrics`` (through prometheus_client's own text parser).
"""

from __future__ import annotations

import csv
import functools
import io
import json
import re
from typing import Any

from k3rollout.checks.cuda_table import image_cuda

GPU_QUERY_FIELDS = ("index", "name", "driver_version", "memory.total", "memory.used", "pci.bus_id")
GPU_QUERY_ARGV = ["nvidia-smi", f"--query-gpu={','.join(GPU_QUERY_FIELDS)}", "--format=csv,noheader,nounits"]


class ParseError(ValueError):
    pass


def parse_gpu_query(text: str, fields: tuple[str, ...] = GPU_QUERY_FIELDS) -> list[dict[str, str]]:
    rows = []
    for row in csv.reader(io.StringIO(text.strip())):
        if not row:
            continue
        row = [c.strip() for c in row]
        if len(row) != len(fields):
            raise ParseError(f"nvidia-smi CSV row has {len(row)} columns, expected {len(fields)}: {row!r}")
        rows.append(dict(zip(fields, row, strict=True)))
    if not rows:
        raise ParseError("nvidia-smi returned no GPU rows")
    return rows


def gpu_facts(rows: list[dict[str, str]]) -> dict[str, Any]:
    drivers = sorted({r["driver_version"] for r in rows})
    models = sorted({r["name"] for r in rows})
    if len(drivers) != 1:
        raise ParseError(f"GPUs report different driver versions: {drivers}")
    return {"gpu_count": len(rows), "gpu_model": models[0] if len(models) == 1 else ", ".join(models),
            "driver_version": drivers[0], "driver_branch": int(drivers[0].split(".")[0]),
            "gpu_mem_total_mib": int(float(rows[0]["memory.total"])) if "memory.total" in rows[0] else None,
            "gpu_mem_used_mib": max(int(float(r.get("memory.used", 0) or 0)) for r in rows)}


_SMI_HEAD = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s+(\S+)\s+CUDA Version:\s+(\S+)")


_SMI_GPU = re.compile(r"\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|")


def parse_smi_table(text: str) -> dict[str, Any]:
    m = _SMI_HEAD.search(text)
    if not m:
        raise ParseError("no 'Driver Version ... CUDA Version' header in nvidia-smi output")
    # a GPU row: "|   0  NVIDIA H200    On  |". The pattern backtracks for tens of
    # microseconds on each process row, so only lines that could match are tried
    gpus = [g for line in text.splitlines() if line.startswith("|") and "On" in line and (g := _SMI_GPU.match(line))]
    return {"smi_version": m.group(1), "driver_version": m.group(2), "cuda_version": m.group(3),
            "gpu_count": len(gpus)}


def parse_proc_version(text: str) -> str:
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    if not m:
        raise ParseError("no kernel module version in /proc/driver/nvidia/version")
    return m.group(1)


DPKG_ARGV = ["dpkg-query", "-W", "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n", "nvidia-*", "libnvidia-*"]
# Canonical's precompiled module packages (dpkg-query exits 1 when none is installed)
DPKG_MODULES_ARGV = ["dpkg-query", "-W", "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n", "linux-modules-nvidia-*"]
RPM_ARGV = ["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n", "nvidia*", "kmod-nvidia*", "libnvidia*"]


def parse_packages(text: str) -> list[dict[str, str]]:
    out = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0].strip():
            continue
        status = parts[2].strip() if len(parts) > 2 else "ii"
        out.append({"name": parts[0].strip(), "version": parts[1].strip(), "status": status})
    return out


def parse_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ParseError(f"{what}: not JSON ({exc})") from None


def docker_info_facts(info: dict[str, Any]) -> dict[str, Any]:
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    return {"docker_version": info.get("ServerVersion"), "container_runtimes": runtimes,
            "nvidia_runtime": "nvidia" in runtimes or bool(info.get("CDISpecDirs")) and "nvidia" in runtimes,
            "default_runtime": info.get("DefaultRuntime")}


def image_facts(inspect: list[dict[str, Any]]) -> dict[str, Any]:
    if not inspect:
        raise ParseError("docker image inspect returned no image")
    img = inspect[0]
    env = (img.get("Config") or {}).get("Env") or []
    labels = (img.get("Config") or {}).get("Labels") or {}
    digests = img.get("RepoDigests") or []
    return {"id": img.get("Id"), "tags": img.get("RepoTags") or [], "digest": digests[0] if digests else None,
            "cuda": image_cuda(env), "created": img.get("Created"),
            "vllm_version": labels.get("org.opencontainers.image.version"),
            "source": labels.get("org.opencontainers.image.source")}


def kubectl_unschedulable(text: str) -> str:
    """``kubectl get node N -o jsonpath={.spec.unschedulable}``: "true" or empty."""
    return "cordoned" if text.strip() == "true" else "schedulable"


# Slurm base states and flags under which work is still running on the node
_SLURM_BUSY = ("ALLOCATED", "MIXED", "COMPLETING")


def scontrol_node_state(text: str) -> str:
    """``scontrol show node N``: ``State=BASE[+FLAG...]``. A node held out of service
    (DRAIN, DOWN, FAIL) while jobs still run there (``ALLOCATED+DRAIN``, ``MIXED+DRAIN``,
    ``+COMPLETING``: sinfo's "draining") is ``draining``, not out of service; a held node
    that runs nothing (``IDLE+DRAIN``: "drained", or DOWN) is ``cordoned``."""
    m = re.search(r"\bState=(\S+)", text)
    if not m:
        raise ParseError("no State= in scontrol output")
    state = m.group(1).upper()
    parts = state.rstrip("*~#!%$@^-").split("+")
    base, flags = parts[0], set(parts[1:])
    if not ("DRAIN" in state or "DOWN" in state or "FAIL" in flags or base == "FAIL"):
        return "schedulable"
    if base in _SLURM_BUSY or "COMPLETING" in flags:
        return "draining"
    return "cordoned"


# flags under which an IDLE node is not idle: a job is still completing there, or the
# backfill scheduler has planned one on it (slurm.schedmd.com/scontrol.html, NODE STATE)
_SLURM_NOT_IDLE_FLAGS = ("COMPLETING", "PLANNED")


def scontrol_node_idle(text: str) -> tuple[bool, str]:
    """``scontrol show node N``: (nothing runs there, the ``State=`` value). Idle is the
    base state IDLE (a drained node, ``IDLE+DRAIN``, included), without a job completing
    or planned there; MIXED, ALLOCATED (with or without DRAIN: DRAINING), DOWN or FAIL
    are not."""
    m = re.search(r"\bState=(\S+)", text)
    if not m:
        raise ParseError("no State= in scontrol output")
    state = m.group(1).upper()
    parts = state.rstrip("*~#!%$@^-").split("+")
    return parts[0] == "IDLE" and not set(parts[1:]) & set(_SLURM_NOT_IDLE_FLAGS), state


_SCHEDULER_STATE = {"kubernetes": kubectl_unschedulable, "slurm": scontrol_node_state}


def scheduler_state(kind: str, text: str) -> str:
    """The node's state from its scheduler's own output (see k3rollout/scheduler)."""
    parse = _SCHEDULER_STATE.get(kind)
    return parse(text) if parse else "unmanaged"


# one result row: size count type redop [root] then (time algbw busbw wrong) out-of-place and in-place;
# nccl-tests before 2.11 have no root column and report a float max error instead of a #wrong count
_NCCL_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(?:(-?\d+)\s+)?([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
                       r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$")


def _wrong(cell: str) -> bool:
    if cell == "N/A":
        return False
    try:
        return int(cell) > 0                 # a #wrong count
    except ValueError:
        pass
    try:
        return float(cell) > 1e-3            # a max error (rounding in float sums is ~1e-7)
    except ValueError:
        return True


def parse_nccl_tests(text: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for line in text.splitlines():
        m = _NCCL_ROW.match(line)
        if m:
            rows.append({"size": int(m.group(1)), "time_us": float(m.group(6)), "algbw": float(m.group(7)),
                         "busbw": float(m.group(8)), "wrong": m.group(9), "busbw_inplace": float(m.group(12)),
                         "wrong_inplace": m.group(13)})
    avg = re.search(r"^#?\s*Avg bus bandwidth\s*:\s*([\d.]+)", text, re.M)
    if not rows or not avg:
        raise ParseError("no all_reduce_perf result table / '# Avg bus bandwidth' line")
    wrong = [r for r in rows if _wrong(r["wrong"]) or _wrong(r["wrong_inplace"])]
    return {"rows": rows, "avg_busbw": float(avg.group(1)), "max_busbw": max(r["busbw"] for r in rows),
            "largest_size": rows[-1]["size"], "largest_busbw": rows[-1]["busbw"], "wrong_rows": len(wrong)}


@functools.lru_cache(maxsize=32)
def _family_lines(only: tuple[str, ...]) -> re.Pattern[str]:
    """Sample lines, and ``# HELP`` / ``# TYPE`` lines, of the families named by prefix."""
    names = "|".join(re.escape(p) for p in only)
    return re.compile(rf"^(?:# [A-Z]+ )?(?:{names})[^\n]*", re.M)


def parse_vllm_metrics(text: str, only: tuple[str, ...] | None = None) -> dict[str, float]:
    """Sum each vLLM metric family over its labels, using prometheus_client's parser.
    ``only``: metric-name prefixes to keep; other families' lines are dropped before
    parsing (a server's histograms are most of the text and most of the parse time)."""
    from prometheus_client.parser import text_string_to_metric_families  # lazy: only where metrics are read

    if only:
        text = "\n".join(_family_lines(tuple(only)).findall(text)) + "\n"
    out: dict[str, float] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out[s.name] = out.get(s.name, 0.0) + float(s.value)
    except ValueError as exc:
        raise ParseError(f"vLLM /metrics: {exc}") from None
    return out


def parse_histogram(text: str, name: str) -> dict[str, Any] | None:
    """One Prometheus histogram family summed over its other labels: ``{"count", "sum",
    "buckets": [(le, cumulative count), ...]}`` in ``le`` order (``+Inf`` last); None when
    /metrics has no such family."""
    from prometheus_client.parser import text_string_to_metric_families  # lazy: only where metrics are read

    lines = "\n".join(_family_lines((name,)).findall(text)) + "\n"
    count = total = 0.0
    buckets: dict[float, float] = {}
    seen = False
    try:
        for fam in text_string_to_metric_families(lines):
            for sm in fam.samples:
                if sm.name == f"{name}_count":
                    count += float(sm.value)
                    seen = True
                elif sm.name == f"{name}_sum":
                    total += float(sm.value)
                elif sm.name == f"{name}_bucket":
                    le = float(sm.labels.get("le", "inf"))
                    buckets[le] = buckets.get(le, 0.0) + float(sm.value)
    except ValueError as exc:
        raise ParseError(f"vLLM /metrics: {exc}") from None
    return {"count": count, "sum": total, "buckets": sorted(buckets.items())} if seen else None


def parse_cache_config_info(text: str) -> dict[str, str] | None:
    """The labels of vLLM's ``vllm:cache_config_info`` (a gauge set to 1 whose labels are every
    CacheConfig field as a string: ``log_metrics_info`` in vllm/v1/metrics/loggers.py,
    ``metrics_info`` in vllm/config/cache.py); None when /metrics has none."""
    from prometheus_client.parser import text_string_to_metric_families  # lazy: only where metrics are read

    lines = "\n".join(_family_lines(("vllm:cache_config_info",)).findall(text)) + "\n"
    try:
        for fam in text_string_to_metric_families(lines):
            for sample in fam.samples:
                if sample.name == "vllm:cache_config_info":
                    return dict(sample.labels)
    except ValueError as exc:
        raise ParseError(f"vLLM /metrics: {exc}") from None
    return None


def cache_block_tokens(info: dict[str, str]) -> int | None:
    """Tokens per prefix-cache block from ``vllm:cache_config_info``: ``cache_hit_alignment_tokens``
    (where hits land) when the server set it, else the larger of ``block_size`` and
    ``mamba_block_size`` (a hybrid model caches its recurrent state only on mamba blocks under
    mamba_cache_mode "align", vllm/config/cache.py; vLLM sizes the attention block to the
    mamba page, vllm/platforms/interface.py)."""
    def num(key: str) -> int | None:
        try:
            v = int(info.get(key) or "")
        except ValueError:
            return None
        return v if v > 0 else None

    aligned = num("cache_hit_alignment_tokens")
    if aligned:
        return aligned
    sizes = [v for v in (num("block_size"), num("mamba_block_size")) if v]
    return max(sizes) if sizes else None


# ---------------------------------------------------------------- package repositories
# What a node's configured repositories offer, and how its packages are held. Each parser
# reads the tool's real output (samples and their sources in tests/data/parsers/README.md).


def apt_madison_argv(names: list[str]) -> list[str]:
    return ["apt-cache", "madison", *names]


def parse_apt_madison(text: str) -> dict[str, list[dict[str, str]]]:
    """``apt-cache madison``: `` name | version | url dist/component arch Packages``, one
    line per version and source, newest first. Only repository sources are listed (the
    dpkg status file is not), so a version here is one apt can still download."""
    out: dict[str, list[dict[str, str]]] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 3 or not parts[0] or not parts[1]:
            continue
        name, version, source = parts
        if source.endswith("Sources"):
            continue                      # a deb-src line: not an installable binary
        out.setdefault(name, []).append({"version": version, "source": source})
    return out


_POLICY_VER = re.compile(r"^( \*\*\* |     )(\S+) (-?\d+)$")
_POLICY_SRC = re.compile(r"^\s{8}(-?\d+) (.+)$")


def parse_apt_policy(text: str) -> dict[str, dict[str, Any]]:
    """``apt-cache policy NAME...`` (C locale): per package the installed version, the
    candidate, and each version with its sources; ``origin`` is where the installed
    version came from (its first source that is not the dpkg status file), None when no
    repository offers it any longer."""
    out: dict[str, dict[str, Any]] = {}
    cur: dict[str, Any] | None = None
    ver: dict[str, Any] | None = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.rstrip().endswith(":"):
            cur = {"installed": None, "candidate": None, "versions": []}
            out[line.rstrip()[:-1]] = cur
            ver = None
            continue
        if cur is None:
            continue
        s = line.strip()
        if s.startswith("Installed:"):
            v = s.split(":", 1)[1].strip()
            cur["installed"] = None if v == "(none)" else v
        elif s.startswith("Candidate:"):
            v = s.split(":", 1)[1].strip()
            cur["candidate"] = None if v == "(none)" else v
        elif (m := _POLICY_VER.match(line)):
            ver = {"version": m.group(2), "installed": m.group(1) == " *** ", "sources": []}
            cur["versions"].append(ver)
        elif ver is not None and (m := _POLICY_SRC.match(line)):
            ver["sources"].append(m.group(2).strip())
    for pkg in out.values():
        pkg["origin"] = None
        for v in pkg["versions"]:
            if v["version"] == pkg["installed"]:
                repos = [s for s in v["sources"] if s != "/var/lib/dpkg/status"]
                pkg["origin"] = repos[0] if repos else None
    return out


def parse_apt_showhold(text: str) -> list[str]:
    """``apt-mark showhold``: one held package name per line."""
    return sorted({ln.strip() for ln in text.splitlines() if ln.strip() and " " not in ln.strip()})


_VERSIONLOCK = re.compile(r"^(?P<name>.+)-(?:(?P<epoch>\d+):)?(?P<version>[^-:]+)-(?P<release>[^-]+)\.(?P<arch>[^.]+)$")


def parse_versionlock_list(text: str) -> list[dict[str, Any]]:
    """``dnf versionlock list`` (python3-dnf-plugin-versionlock): the lock list's entries as
    written, ``name-epoch:version-release.*`` (``dnf versionlock add``'s form; an entry written
    by hand may leave the epoch out); a ``!`` entry excludes that version instead of locking.
    Returns [{name, entry, version, exclude}] for each entry; dnf's metadata line and the
    list file's comments are not entries."""
    out = []
    for line in text.splitlines():
        ln = line.strip()
        if not ln or ln.startswith(("#", "Last metadata expiration check")):
            continue
        m = _VERSIONLOCK.match(ln.lstrip("!"))
        if not m:
            continue
        out.append({"name": m["name"], "entry": ln, "version": f"{m['version']}-{m['release']}",
                    "exclude": ln.startswith("!")})
    return out


_DNF_ROW = re.compile(r"^(\S+)\.(x86_64|aarch64|noarch|i686)\s+(\S+)\s+(@?\S+)\s*$")


def parse_dnf_list(text: str) -> dict[str, list[dict[str, Any]]]:
    """``dnf list --showduplicates NAME...``: per package its versions (``[epoch:]version-
    release``) with repository; rows under "Installed Packages" carry ``@repo`` and
    ``installed``. dnf wraps a row whose name is too long onto two lines; they are joined."""
    out: dict[str, list[dict[str, Any]]] = {}
    section = None
    pending = ""
    for raw in text.splitlines():
        line = (pending + " " + raw.strip()) if pending else raw
        pending = ""
        s = line.strip()
        if s in ("Installed Packages", "Available Packages"):
            section = s.split()[0].lower()
            continue
        if section is None or not s:
            continue
        m = _DNF_ROW.match(s)
        if not m:
            if len(s.split()) == 1 and "." in s:
                pending = s           # a wrapped name: the rest is on the next line
            continue
        name, _, evr, repo = m.groups()
        out.setdefault(name, []).append({"evr": evr, "version": evr.split(":", 1)[-1], "repo": repo.lstrip("@"),
                                         "installed": section == "installed"})
    return out


_MODULE_ROW = re.compile(r"^(\S+)\s+(\S+?)((?:\s\[[dexi]\])*)\s{2,}(.*)$")


def parse_dnf_module_list(text: str) -> list[dict[str, Any]]:
    """``dnf module list NAME``: one entry per stream, with its flags ([d]efault,
    [e]nabled, [x] disabled, [i]nstalled) and profiles."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(("Name ", "Hint:", "Last metadata")):
            continue
        m = _MODULE_ROW.match(line.rstrip())
        if not m or m.group(1) in ("Name",):
            continue
        flags = set(re.findall(r"\[([dexi])\]", m.group(3)))
        profiles = m.group(4).split("  ")[0]
        out.append({"module": m.group(1), "stream": m.group(2), "default": "d" in flags, "enabled": "e" in flags,
                    "disabled": "x" in flags,
                    # [i] marks an installed profile (e.g. "fm [i]"), so the stream is installed
                    "installed": "i" in flags or "[i]" in profiles,
                    "profiles": [p.strip().split()[0] for p in profiles.split(",") if p.strip()]})
    return out


def enabled_stream(modules: list[dict[str, Any]], module: str = "nvidia-driver") -> str | None:
    for m in modules:
        if m["module"] == module and m["enabled"]:
            stream: str = m["stream"]
            return stream
    return None


def parse_mokutil_sb_state(text: str) -> bool | None:
    """``mokutil --sb-state``: True "SecureBoot enabled", False "SecureBoot disabled" or a
    system without EFI Secure Boot, None when the output says neither."""
    t = text.lower()
    if "secureboot enabled" in t:
        return True
    if "secureboot disabled" in t or "doesn't support secure boot" in t or "efi variables are not supported" in t:
        return False
    return None


def parse_nvidia_params(text: str) -> dict[str, str]:
    """``/proc/driver/nvidia/params``: ``Name: value`` lines (strings quoted)."""
    out = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        k, v = line.split(":", 1)
        v = v.strip()
        if len(v) >= 2 and v[0] == v[-1] == '"':
            v = v[1:-1]
        out[k.strip()] = v
    return out


def parse_modprobe_d(text: str) -> list[dict[str, str]]:
    """``grep -H . /etc/modprobe.d/*.conf`` style lines (``file:line``): the nvidia
    ``options``/``blacklist``/``install`` lines, with the file they are in."""
    out = []
    for line in text.splitlines():
        path, sep, rest = line.partition(":")
        if not sep:
            continue
        rest = rest.strip()
        if not rest or rest.startswith("#"):
            continue
        if "nvidia" in rest or "nouveau" in rest:
            out.append({"file": path, "line": rest})
    return out


def nvidia_options_files(text: str) -> list[dict[str, str]]:
    """The files of ``grep -rH . /etc/modprobe.d`` that set options of the ``nvidia`` kernel
    module (an ``options nvidia ...`` line; ``nvidia-drm``, ``nvidia_uvm`` and the rest are
    other modules), each with its lines as grep printed them (every non-empty line, in order):
    what a driver rollback writes back when a reinstall dropped the file."""
    lines: dict[str, list[str]] = {}
    for line in text.splitlines():
        path, sep, rest = line.partition(":")
        if sep:
            lines.setdefault(path, []).append(rest)
    return [{"file": path, "content": "".join(f"{x}\n" for x in got)} for path, got in lines.items()
            if any(x.split()[:2] == ["options", "nvidia"] for x in got)]
