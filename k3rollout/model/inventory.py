"""Ansible YAML inventories (all/children/hosts/vars + group_vars/ and host_vars/ beside it).

The semantics follow ansible-core's ``yaml`` inventory plugin and its variable
precedence (docs: "Understanding variable precedence"): inventory-file group vars <
``group_vars/all`` < ``group_vars/<group>`` < inventory-file host vars < ``host_vars/<host>``;
groups merge parents before children (depth, then ``ansible_group_priority``, then name).
Host ranges ``gpu-[01:16]``, ``node[a:f]`` and strides expand as Ansible expands them.
This module reads files only; it never contacts a host.
"""

from __future__ import annotations

import fnmatch
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k3rollout.errors import InputError
from k3rollout.model.yamlsrc import LDict, load_yaml, plain

SIM_FAULTS = (
    "driver_install_fails",
    "no_boot_after_upgrade",
    "cuda_init_fails",
    "container_runtime_missing",
    "vllm_oom",
    "nccl_broken",
    "ssh_drops",
    "prefix_cache_miss",
    "slow_reboot",
)

_VALID_GROUP_KEYS = ("vars", "children", "hosts")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+$")
_GROUP_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


@dataclass(frozen=True)
class Origin:
    path: str
    line: int | None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


@dataclass(frozen=True)
class Host:
    name: str
    vars: dict[str, Any]
    groups: tuple[str, ...]
    origin: Origin
    var_origins: dict[str, Origin] = field(default_factory=dict, compare=False, repr=False)

    @property
    def address(self) -> str:
        return str(self.vars.get("ansible_host", self.name))


@dataclass
class Group:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)
    var_lines: dict[str, int] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    origin: Origin | None = None


@dataclass(frozen=True)
class Inventory:
    path: str
    hosts: dict[str, Host]
    groups: dict[str, Group]

    def group_hosts(self, name: str) -> list[str]:
        """All hosts of a group and its descendants, in Ansible's order (breadth first)."""
        if name not in self.groups:
            return []
        order: list[str] = []
        seen_hosts: set[str] = set()
        queue = [name]
        seen_groups = {name}
        while queue:
            nxt: list[str] = []
            for g in queue:
                for h in self.groups[g].hosts:
                    if h not in seen_hosts:
                        seen_hosts.add(h)
                        order.append(h)
                for c in self.groups[g].children:
                    if c not in seen_groups:
                        seen_groups.add(c)
                        nxt.append(c)
            queue = nxt
        return order

    def select(self, pattern: str) -> list[str]:
        """Resolve an Ansible host pattern (``a:b``, ``a:&b``, ``a:!b``, wildcards)."""
        parts = [p.strip() for p in re.split(r"[:,]", pattern) if p.strip()]
        if not parts:
            raise InputError(f"empty host pattern {pattern!r}")
        chosen: dict[str, None] = {}          # an ordered set
        for part in parts:
            if part.startswith("&") or part.startswith("!"):
                continue
            for h in self._match(part):
                chosen.setdefault(h)
        for part in parts:
            if part.startswith("&"):
                keep = set(self._match(part[1:]))
                chosen = {h: None for h in chosen if h in keep}
            elif part.startswith("!"):
                drop = set(self._match(part[1:]))
                chosen = {h: None for h in chosen if h not in drop}
        return list(chosen)

    def _match(self, term: str) -> list[str]:
        if term in self.groups:
            return self.group_hosts(term)
        if term in self.hosts:
            return [term]
        if any(c in term for c in "*?["):
            out: list[str] = []
            for g in self.groups:
                if fnmatch.fnmatchcase(g, term):
                    out += [h for h in self.group_hosts(g) if h not in out]
            out += [h for h in self.hosts if fnmatch.fnmatchcase(h, term) and h not in out]
            return out
        return []


def expand_hostname(pattern: str) -> list[str]:
    """Ansible's ``detect_range``/``expand_hostname_range``: ``gpu-[01:16]`` -> gpu-01..gpu-16."""
    m = re.search(r"\[([^\]]+)\]", pattern)
    if not m:
        return [pattern]
    head, tail = pattern[: m.start()], pattern[m.end():]
    spec = m.group(1).split(":")
    if len(spec) not in (2, 3):
        raise ValueError(f"host range [{m.group(1)}] must be [start:end] or [start:end:step]")
    beg, end = spec[0], spec[1]
    step = int(spec[2]) if len(spec) == 3 and spec[2] else 1
    if step <= 0:
        raise ValueError("host range step must be positive")
    if not beg:
        beg = "0"
    if beg.isalpha() and end.isalpha():
        if len(beg) != 1 or len(end) != 1:
            raise ValueError("alphabetic host ranges take single letters")
        letters = string.ascii_letters
        i, j = letters.index(beg), letters.index(end)
        if i > j:
            raise ValueError("host range start is after its end")
        seq = [letters[k] for k in range(i, j + 1, step)]
    elif beg.isdigit() and end.isdigit():
        if len(beg) != len(end) and beg.startswith("0") and len(beg) > 1:
            raise ValueError("host range start and end must have the same width when zero-padded")
        width = len(beg) if beg.startswith("0") and len(beg) > 1 else 0
        b, e = int(beg), int(end)
        if b > e:
            raise ValueError("host range start is after its end")
        seq = [str(k).zfill(width) for k in range(b, e + 1, step)]
    else:
        raise ValueError(f"host range [{m.group(1)}] mixes letters and digits")
    out: list[str] = []
    for s in seq:
        out.extend(expand_hostname(head + s + tail))
    return out


class _Builder:
    def __init__(self, path: Path):
        self.path = path
        self.groups: dict[str, Group] = {}
        self.hosts: dict[str, dict[str, Any]] = {}
        self.host_lines: dict[str, dict[str, int]] = {}
        self.host_origin: dict[str, Origin] = {}
        self.host_order: list[str] = []
        self.members: dict[str, set[str]] = {}

    def err(self, msg: str, line: int | None) -> InputError:
        return InputError(msg, path=str(self.path), line=line)

    def group(self, name: str, line: int | None) -> Group:
        if name not in self.groups:
            self.groups[name] = Group(name=name, origin=Origin(str(self.path), line))
        return self.groups[name]

    def add_child(self, parent: str, child: str, line: int | None) -> None:
        if parent == child or child in self._ancestors(parent):
            raise self.err(f"group {child!r} cannot be a child of {parent!r}: that makes a cycle", line)
        p, c = self.groups[parent], self.groups[child]
        if child not in p.children:
            p.children.append(child)
        if parent not in c.parents:
            c.parents.append(parent)

    def _ancestors(self, name: str) -> set[str]:
        seen: set[str] = set()
        stack = list(self.groups[name].parents) if name in self.groups else []
        while stack:
            g = stack.pop()
            if g not in seen:
                seen.add(g)
                stack.extend(self.groups[g].parents)
        return seen

    def parse_group(self, name: Any, data: Any, line: int | None) -> str:
        if not isinstance(name, str) or not _GROUP_RE.match(name):
            raise self.err(f"invalid group name {name!r}: use letters, digits, '_' and '-'", line)
        grp = self.group(name, line)
        if data is None:
            return name
        if not isinstance(data, dict):
            raise self.err(f"group {name!r} must be a mapping with vars/children/hosts, "
                           f"got {type(data).__name__}", line)
        for key, value in data.items():
            kline = data.line_of(key) if isinstance(data, LDict) else line
            if key not in _VALID_GROUP_KEYS:
                raise self.err(f"group {name!r}: unknown key {key!r} (expected one of "
                               f"{', '.join(_VALID_GROUP_KEYS)}); is a 'hosts:' level missing?", kline)
            if isinstance(value, str):
                value = {value: None}
            if value is None:
                continue
            if not isinstance(value, dict):
                raise self.err(f"group {name!r}: {key!r} must be a mapping, got {type(value).__name__}", kline)
            if key == "vars":
                for var, val in value.items():
                    self._check_var_name(var, value, kline)
                    grp.vars[var] = plain(val)
                    grp.var_lines[var] = value.line_of(var) if isinstance(value, LDict) else kline
            elif key == "children":
                for sub, subdata in value.items():
                    sline = value.line_of(sub) if isinstance(value, LDict) else kline
                    child = self.parse_group(sub, subdata, sline)
                    self.add_child(name, child, sline)
            else:
                for hpat, hvars in value.items():
                    hline = value.line_of(hpat) if isinstance(value, LDict) else kline
                    self.parse_hosts(name, hpat, hvars, hline)
        return name

    def _check_var_name(self, var: Any, container: Any, line: int | None) -> None:
        if not isinstance(var, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", var):
            vline = container.line_of(var) if isinstance(container, LDict) else line
            raise self.err(f"invalid variable name {var!r}: use letters, digits and '_'", vline)

    def parse_hosts(self, group: str, pattern: Any, hvars: Any, line: int | None) -> None:
        if not isinstance(pattern, (str, int)) or not str(pattern).strip():
            raise self.err(f"invalid host name {pattern!r}", line)
        pattern = str(pattern)
        port = None
        if re.search(r":\d+$", pattern) and "[" not in pattern.rsplit(":", 1)[1]:
            pattern, port_s = pattern.rsplit(":", 1)
            port = int(port_s)
        if not _NAME_RE.match(pattern):
            raise self.err(f"invalid host name {pattern!r}: only letters, digits, '.', '-', '_' "
                           "and [a:b] ranges are allowed", line)
        try:
            names = expand_hostname(pattern)
        except ValueError as exc:
            raise self.err(f"host {pattern!r}: {exc}", line) from None
        if hvars is not None and not isinstance(hvars, dict):
            raise self.err(f"host {pattern!r}: vars must be a mapping, got {type(hvars).__name__}", line)
        for h in names:
            if h not in self.hosts:
                self.hosts[h] = {}
                self.host_lines[h] = {}
                self.host_origin[h] = Origin(str(self.path), line)
                self.host_order.append(h)
            if port is not None:
                self.hosts[h]["ansible_port"] = port
                self.host_lines[h]["ansible_port"] = line
            for var, val in (hvars or {}).items():
                self._check_var_name(var, hvars, line)
                self.hosts[h][var] = plain(val)
                self.host_lines[h][var] = hvars.line_of(var) if isinstance(hvars, LDict) else line
            members = self.members.setdefault(group, set())
            if h not in members:
                members.add(h)
                self.groups[group].hosts.append(h)


def _vars_files(base: Path, name: str) -> list[Path]:
    """Ansible's host_group_vars lookup: NAME, NAME.yml/.yaml/.json, or a NAME/ directory."""
    out: list[Path] = []
    for cand in (base / name, base / f"{name}.yml", base / f"{name}.yaml", base / f"{name}.json"):
        if cand.is_file():
            out.append(cand)
        elif cand.is_dir() and cand == base / name:
            out += sorted(p for p in cand.rglob("*") if p.is_file() and p.suffix in ("", ".yml", ".yaml", ".json")
                          and not p.name.startswith("."))
    return out


def _load_vars_file(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    data = load_yaml(path)
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise InputError(f"a vars file must be a mapping of variable names, got {type(data).__name__}",
                         path=str(path), line=getattr(data, "line", None))
    lines: dict[str, int] = {}
    for k in data:
        if not isinstance(k, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
            raise InputError(f"invalid variable name {k!r}", path=str(path), line=data.line_of(k))
        lines[k] = data.line_of(k)
    return {k: plain(v) for k, v in data.items()}, lines


def _depths(groups: dict[str, Group]) -> dict[str, int]:
    depth: dict[str, int] = {}

    def walk(name: str, d: int) -> None:
        if depth.get(name, -1) >= d:
            return
        depth[name] = d
        for c in groups[name].children:
            walk(c, d + 1)

    walk("all", 0)
    for g in groups:
        depth.setdefault(g, 1)
    return depth


def load_inventory(path: str | Path) -> Inventory:
    """Load an Ansible YAML inventory file, or a directory holding ``hosts.yml``/``inventory.yml``."""
    p = Path(path)
    if p.is_dir():
        for cand in ("hosts.yml", "hosts.yaml", "inventory.yml", "inventory.yaml"):
            if (p / cand).is_file():
                p = p / cand
                break
        else:
            raise InputError("directory has no hosts.yml, hosts.yaml, inventory.yml or inventory.yaml",
                             path=str(path))
    data = load_yaml(p)
    b = _Builder(p)
    b.group("all", 1)
    b.group("ungrouped", 1)
    if data is None:
        raise InputError("inventory is empty: expected a top-level 'all:' group", path=str(p), line=1)
    if not isinstance(data, dict):
        raise InputError(f"inventory must be a mapping of groups (e.g. 'all:'), got {type(data).__name__}",
                         path=str(p), line=getattr(data, "line", 1))
    for gname, gdata in data.items():
        gline = data.line_of(gname) if isinstance(data, LDict) else None
        b.parse_group(gname, gdata, gline)
        if gname != "all":
            b.add_child("all", gname, gline)
    b.add_child("all", "ungrouped", None)
    direct: dict[str, list[str]] = {h: [] for h in b.host_order}
    for gname, grp in b.groups.items():
        for h in grp.hosts:
            direct[h].append(gname)
    for h in b.host_order:
        if not any(g != "all" for g in direct[h]) and "ungrouped" not in direct[h]:
            b.groups["ungrouped"].hosts.append(h)
            direct[h].append("ungrouped")
    if h_in_all := list(b.groups["all"].hosts):
        # Ansible lists hosts declared directly under 'all' in 'ungrouped'.
        b.groups["all"].hosts = []
        for h in h_in_all:
            if "ungrouped" not in direct[h]:
                b.groups["ungrouped"].hosts.append(h)
                direct[h].append("ungrouped")

    base = p.parent
    gv_files: dict[str, list[tuple[dict, dict, Path]]] = {}
    for g in b.groups:
        files = _vars_files(base / "group_vars", g)
        gv_files[g] = [(*_load_vars_file(f), f) for f in files]
    hv_files: dict[str, list[tuple[dict, dict, Path]]] = {}
    for h in b.host_order:
        files = _vars_files(base / "host_vars", h)
        hv_files[h] = [(*_load_vars_file(f), f) for f in files]

    depth = _depths(b.groups)

    def sort_key(g: str) -> tuple:
        prio = b.groups[g].vars.get("ansible_group_priority", 1)
        return (depth[g], prio if isinstance(prio, int) else 1, g)

    host_groups: dict[str, set[str]] = {h: set() for h in b.host_order}

    for h in b.host_order:
        # the ancestors of each group the host is directly in
        mine = [g for g in direct[h] if g != "all"]    # hosts directly under 'all' sit in 'ungrouped'
        stack, acc = list(mine), set(mine)
        while stack:
            for par in b.groups[stack.pop()].parents:
                if par not in acc:
                    acc.add(par)
                    stack.append(par)
        acc.add("all")
        host_groups[h] = acc

    hosts: dict[str, Host] = {}
    for h in b.host_order:
        gs = sorted(host_groups[h], key=sort_key)
        merged: dict[str, Any] = {}
        origins: dict[str, Origin] = {}
        for g in gs:
            for k, v in b.groups[g].vars.items():
                if k == "ansible_group_priority":   # a property of the group, not a host var
                    continue
                merged[k] = v
                origins[k] = Origin(str(p), b.groups[g].var_lines.get(k))
        for g in gs:
            for vals, lines, f in gv_files.get(g, []):
                for k, v in vals.items():
                    merged[k] = v
                    origins[k] = Origin(str(f), lines.get(k))
        for k, v in b.hosts[h].items():
            merged[k] = v
            origins[k] = Origin(str(p), b.host_lines[h].get(k))
        for vals, lines, f in hv_files.get(h, []):
            for k, v in vals.items():
                merged[k] = v
                origins[k] = Origin(str(f), lines.get(k))
        merged.setdefault("inventory_hostname", h)
        hosts[h] = Host(name=h, vars=merged, groups=tuple(g for g in gs if g != "all"),
                        origin=b.host_origin[h], var_origins=origins)
        _check_known_vars(hosts[h])
    if not hosts:
        raise InputError("inventory defines no hosts", path=str(p), line=1)
    for host in hosts.values():
        sched_host = host.vars.get("k3_scheduler_host")
        if sched_host is not None and sched_host != "controller" and sched_host not in hosts:
            o = host.var_origins.get("k3_scheduler_host", host.origin)
            raise InputError(f"host {host.name}: k3_scheduler_host {sched_host!r} is not a host of this inventory "
                             "(name one, or 'controller')", path=o.path, line=o.line)
    return Inventory(path=str(p), hosts=hosts, groups=b.groups)


def _check_known_vars(host: Host) -> None:
    """Type-check the variables k3rollout itself reads, naming where each was set."""

    def bad(var: str, why: str) -> InputError:
        o = host.var_origins.get(var, host.origin)
        return InputError(f"host {host.name}: {var} {why}", path=o.path, line=o.line)

    v = host.vars
    for var in ("sim_driver",):
        if var in v and not (isinstance(v[var], str) and re.match(r"^\d{3}\.\d{1,3}(\.\d{1,3})?$", v[var])):
            raise bad(var, f"must be a full driver version string like \"575.57.08\", got {v[var]!r}")
    for var in ("sim_gpu_count", "sim_gpu_mem_gib", "ansible_port", "sim_slurm_job_cpus"):
        if var in v and (not isinstance(v[var], int) or isinstance(v[var], bool) or v[var] < 0):
            raise bad(var, f"must be a non-negative integer, got {v[var]!r}")
    if "sim_gpu_count" in v and not 1 <= v["sim_gpu_count"] <= 64:
        raise bad("sim_gpu_count", "must be between 1 and 64")
    if "sim_faults" in v:
        faults = v["sim_faults"]
        if not isinstance(faults, list) or not all(isinstance(f, str) for f in faults):
            raise bad("sim_faults", f"must be a list of fault names, got {faults!r}")
        unknown = [f for f in faults if f not in SIM_FAULTS]
        if unknown:
            raise bad("sim_faults", f"has unknown fault(s) {unknown}; known: {', '.join(SIM_FAULTS)}")
    for var in ("api_host", "sim_address"):
        # becomes the host part of a URL: a hostname, IPv4 or IPv6 address, nothing else
        if var in v and not (isinstance(v[var], str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,252}|[0-9A-Fa-f:]+",
                                                                     v[var])):
            raise bad(var, f"must be a host name or IP address, got {v[var]!r}")
    for var in ("sim_token_s", "sim_latency_s", "sim_reboot_s", "sim_slow_reboot_s", "sim_slurm_job_s"):
        if var in v and (isinstance(v[var], bool) or not isinstance(v[var], (int, float)) or v[var] < 0):
            raise bad(var, f"must be a non-negative number of seconds, got {v[var]!r}")
    if "scheduler" in v and v["scheduler"] not in ("kubernetes", "slurm", "none"):
        raise bad("scheduler", f"must be kubernetes, slurm or none, got {v['scheduler']!r}")
    if "k3_scheduler_host" in v:
        if not isinstance(v["k3_scheduler_host"], str) or not v["k3_scheduler_host"].strip():
            raise bad("k3_scheduler_host", f"must be an inventory host name or 'controller', got "
                                           f"{v['k3_scheduler_host']!r}")
        if v["k3_scheduler_host"] == host.name:
            raise bad("k3_scheduler_host", "names the host itself: scheduler operations never run on the node "
                                           "being changed")
    if "ansible_connection" in v and v["ansible_connection"] not in ("k3sim", "ssh", "paramiko", "local"):
        raise bad("ansible_connection", f"{v['ansible_connection']!r} is not a connection k3rollout drives "
                                        "(k3sim, ssh, paramiko)")
