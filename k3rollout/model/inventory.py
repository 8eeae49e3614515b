"""Ansible YAML inventories (all/children/hosts/vars + group_vars/ and host_vars/ beside it).

The semantics follow ansible-core's ``yaml`` inventory plugin and its variable
precedence (docs: "Understanding variable precedence"): inventory-file group vars <
``group_vars/all`` < ``group_vars/<group>`` < inventory-file host vars < ``host_vars/<host>``;
groups merge parents before children (depth, then ``ansible_group_priority``, then name).
Host ranges ``gpu-[01:16]``, ``node[a:f]`` and strides expand as Ansible expands them.
This module reads files only; it never contacts a host.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import string
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from k3rollout.errors import InputError
from k3rollout.model import ansible_inventory as ai
from k3rollout.model.ansible_inventory import VaultOptions
from k3rollout.model.backends import DRIVER_BACKENDS, WORKLOAD_BACKENDS
from k3rollout.model.patterns import select as select_hosts
from k3rollout.model.yamlsrc import (
    InvalidYaml,
    LDict,
    check_regular_file,
    decode_utf8,
    load_yaml,
    load_yaml_text,
    plain,
)
from k3rollout.plugins import registered, transport_plugin, transport_plugins

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
    var_lines: dict[str, int | None] = field(default_factory=dict)
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    origin: Origin | None = None


@dataclass(frozen=True)
class Inventory:
    path: str
    hosts: dict[str, Host]
    groups: dict[str, Group]
    # what -i named (one or several files, directories, scripts, plugin configs) and who
    # resolved it: "native" (this module) or "ansible" (ansible-inventory --list)
    sources: tuple[str, ...] = ()
    resolver: str = "native"
    sha256: str = ""
    playbook_dir: str | None = None
    vault_password_files: tuple[str, ...] = ()
    # the values decrypted from vault: masked in the journal, evidence and reports
    vault_values: tuple[str, ...] = field(default=(), repr=False)
    # the JSON ansible-inventory printed, when it resolved the inventory
    ansible_json: dict[str, Any] | None = field(default=None, compare=False, repr=False)

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

    def select(self, pattern: str, limit: str | None = None) -> list[str]:
        """The hosts an Ansible host pattern selects, optionally narrowed by a ``--limit``
        (see k3rollout.model.patterns for the grammar)."""
        return select_hosts(self, pattern, limit)

    def limited(self, limit: str | None) -> Inventory:
        """This inventory with only the hosts ``--limit`` selects (groups keep their order)."""
        if not limit:
            return self
        keep = self.select("all", limit)
        if not keep:
            raise InputError(f"--limit {limit!r} matches no host in the inventory", path=self.path)
        return self.only(keep)

    def only(self, names: list[str] | set[str]) -> Inventory:
        """This inventory with only these hosts (as ``--limit`` left them; kept for resume)."""
        keep = set(names)
        groups = {n: Group(name=g.name, vars=g.vars, var_lines=g.var_lines, hosts=[h for h in g.hosts if h in keep],
                           children=list(g.children), parents=list(g.parents), origin=g.origin)
                  for n, g in self.groups.items()}
        return replace(self, hosts={n: h for n, h in self.hosts.items() if n in keep}, groups=groups,
                       ansible_json=None)

    def with_extra_vars(self, extra: dict[str, Any]) -> Inventory:
        """Every host with ``-e`` variables over its own (Ansible: extra vars win over all)."""
        if not extra:
            return self
        hosts = {n: replace(h, vars={**h.vars, **extra},
                            var_origins={**h.var_origins, **{k: Origin("--extra-vars", None) for k in extra}})
                 for n, h in self.hosts.items()}
        return replace(self, hosts=hosts, ansible_json=None)

    def to_ansible_json(self) -> dict[str, Any]:
        """The shape ``ansible-inventory --list`` prints: merged host vars under _meta,
        groups with their direct hosts and children; empty groups left out."""
        if self.ansible_json is not None:
            return self.ansible_json
        out: dict[str, Any] = {"_meta": {"hostvars": {}, "profile": "inventory_legacy"}}
        for name, h in sorted(self.hosts.items()):
            v = {k: val for k, val in h.vars.items() if k != "inventory_hostname"}
            if v:
                out["_meta"]["hostvars"][name] = v
        out["all"] = {"children": list(self.groups["all"].children)}
        for name in sorted(self.groups):
            g = self.groups[name]
            if name == "all":
                continue
            body: dict[str, Any] = {}
            if g.children:
                body["children"] = list(g.children)
            if g.hosts:
                body["hosts"] = list(g.hosts)
            if body:
                out[name] = body
        return out

    def host_json(self, name: str) -> dict[str, Any]:
        """What ``ansible-inventory --host NAME`` prints: the host's merged variables."""
        if name not in self.hosts:
            raise InputError(f"no host {name!r} in the inventory", path=self.path)
        return {k: v for k, v in sorted(self.hosts[name].vars.items()) if k != "inventory_hostname"}


def expand_hostname(pattern: str) -> list[str]:
    """Ansible's ``detect_range``/``expand_hostname_range``: ``gpu-[01:16]`` -> gpu-01..gpu-16."""
    m = re.search(r"\[([^\]]+)\]", pattern)
    if not m:
        return [pattern]
    ranges = _RANGE.findall(pattern)
    if ranges and _range_size(ranges) > MAX_RANGE_HOSTS:
        raise ValueError(f"expands to {_range_size(ranges):,} hosts, more than {MAX_RANGE_HOSTS:,}; refused")
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
        self.host_lines: dict[str, dict[str, int | None]] = {}
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
    if not isinstance(data, LDict):
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


class NotYamlInventory(InputError):
    """A file this module's reader cannot parse as a YAML inventory (not YAML, or not a mapping
    of groups). Ansible tries its inventory plugins in turn (a ``.yaml`` file holding INI text
    is read by its ini plugin), so ansible-inventory is asked next."""


def _load_native(p: Path) -> Inventory:
    """One Ansible YAML inventory file, with group_vars/ and host_vars/ beside it."""
    try:
        data = load_yaml(p)
    except InvalidYaml as exc:
        raise NotYamlInventory(exc.message, path=exc.path, line=exc.line) from None
    b = _Builder(p)
    b.group("all", 1)
    b.group("ungrouped", 1)
    if data is None:
        raise InputError("inventory is empty: expected a top-level 'all:' group", path=str(p), line=1)
    if not isinstance(data, dict):
        raise NotYamlInventory(f"inventory must be a mapping of groups (e.g. 'all:'), got {type(data).__name__}",
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
    # Ansible's reconcile_inventory: a host declared directly under 'all' is listed in
    # 'ungrouped' only when no other group has it (done above), and a host in 'ungrouped'
    # and in another group is taken out of 'ungrouped'
    b.groups["all"].hosts = []
    for h in b.host_order:
        if "ungrouped" in direct[h] and any(g not in ("all", "ungrouped") for g in direct[h]):
            b.groups["ungrouped"].hosts.remove(h)
            direct[h].remove("ungrouped")

    base = p.parent
    gv_files: dict[str, list[tuple[dict[str, Any], dict[str, int], Path]]] = {}
    for g in b.groups:
        files = _vars_files(base / "group_vars", g)
        gv_files[g] = [(*_load_vars_file(f), f) for f in files]
    hv_files: dict[str, list[tuple[dict[str, Any], dict[str, int], Path]]] = {}
    for h in b.host_order:
        files = _vars_files(base / "host_vars", h)
        hv_files[h] = [(*_load_vars_file(f), f) for f in files]

    depth = _depths(b.groups)

    def sort_key(g: str) -> tuple[int, int, str]:
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
    _check_scheduler_hosts(hosts)
    return Inventory(path=str(p), hosts=hosts, groups=b.groups, sources=(str(p),), resolver="native")


def _check_scheduler_hosts(hosts: dict[str, Host]) -> None:
    for host in hosts.values():
        sched_host = host.vars.get("k3_scheduler_host")
        if sched_host is not None and sched_host != "controller" and sched_host not in hosts:
            o = host.var_origins.get("k3_scheduler_host", host.origin)
            raise InputError(f"host {host.name}: k3_scheduler_host {sched_host!r} is not a host of this inventory "
                             "(name one, or 'controller')", path=o.path, line=o.line)


def _check_known_vars(host: Host) -> None:
    """Type-check the variables k3rollout itself reads, and ask each registered transport to
    check its own (k3rollout/plugins.py), naming where each was set."""

    def bad(var: str, why: str) -> InputError:
        o = host.var_origins.get(var, host.origin)
        return InputError(f"host {host.name}: {var} {why}", path=o.path, line=o.line)

    v = host.vars
    # each registered transport's own variables, which k3rollout does not know
    for plugin in transport_plugins():
        refused = plugin.check_host_vars(v)
        if refused is not None:
            raise bad(*refused)
    port = v.get("ansible_port")
    if "ansible_port" in v and (not isinstance(port, int) or isinstance(port, bool) or port < 0):
        raise bad("ansible_port", f"must be a non-negative integer, got {port!r}")
    # api_host becomes the host part of a URL: a hostname, IPv4 or IPv6 address, nothing else
    api = v.get("api_host")
    if "api_host" in v and not (isinstance(api, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.\-]{0,252}|[0-9A-Fa-f:]+",
                                                                      api)):
        raise bad("api_host", f"must be a host name or IP address, got {api!r}")
    if "scheduler" in v and v["scheduler"] not in ("kubernetes", "slurm", "none"):
        raise bad("scheduler", f"must be kubernetes, slurm or none, got {v['scheduler']!r}")
    if "k3_driver_backend" in v and v["k3_driver_backend"] not in DRIVER_BACKENDS:
        raise bad("k3_driver_backend", f"must be {' or '.join(DRIVER_BACKENDS)}, got {v['k3_driver_backend']!r}")
    if "k3_workload_backend" in v:
        if v["k3_workload_backend"] not in WORKLOAD_BACKENDS:
            raise bad("k3_workload_backend", f"must be {', '.join(WORKLOAD_BACKENDS[:-1])} or {WORKLOAD_BACKENDS[-1]}, "
                                             f"got {v['k3_workload_backend']!r}")
        if v["k3_workload_backend"] == "slurm" and v.get("scheduler") != "slurm":
            raise bad("k3_workload_backend", "slurm needs scheduler: slurm (checks are jobs in a maintenance "
                                             f"reservation), got scheduler {v.get('scheduler')!r}")
        if v["k3_workload_backend"] == "kubernetes" and v.get("scheduler", "kubernetes") != "kubernetes":
            raise bad("k3_workload_backend", "kubernetes needs scheduler: kubernetes (test servers are Pods the "
                                             f"cluster's API server runs), got scheduler {v.get('scheduler')!r}")
    if "k3_container_launcher" in v and v["k3_container_launcher"] not in ("pyxis", "enroot", "apptainer", "docker"):
        raise bad("k3_container_launcher", "must be pyxis, enroot, apptainer or docker, got "
                                           f"{v['k3_container_launcher']!r}")
    if v.get("k3_driver_backend") == "gpu-operator":
        if v.get("scheduler", "kubernetes") != "kubernetes":
            raise bad("k3_driver_backend", "gpu-operator needs scheduler: kubernetes (the operator is a Kubernetes "
                                           f"controller), got scheduler {v.get('scheduler')!r}")
        for var in ("k3_gpu_operator_pool_label", "k3_gpu_operator_pool"):
            if not isinstance(v.get(var), str) or not v[var].strip():
                raise bad(var if var in v else "k3_driver_backend",
                          f"k3_driver_backend gpu-operator needs {var} (the node label an NVIDIADriver's "
                          f"nodeSelector matches, and the target pool's value), got {v.get(var)!r}")
    if "k3_scheduler_host" in v:
        if not isinstance(v["k3_scheduler_host"], str) or not v["k3_scheduler_host"].strip():
            raise bad("k3_scheduler_host", f"must be an inventory host name or 'controller', got "
                                           f"{v['k3_scheduler_host']!r}")
        if v["k3_scheduler_host"] == host.name:
            raise bad("k3_scheduler_host", "names the host itself: scheduler operations never run on the node "
                                           "being changed")
    if "ansible_connection" in v and v["ansible_connection"] not in (*BUILT_IN_CONNECTIONS, *registered()):
        raise bad("ansible_connection", f"{v['ansible_connection']!r} is not a connection k3rollout drives "
                                        f"({', '.join(sorted({*BUILT_IN_CONNECTIONS, *registered()} - {'local'}))})")


# --- host names and addresses ---------------------------------------------------------------

# RFC 1123 labels; inventory names may also hold '_' (Ansible aliases such as gpu_a01),
# addresses that k3rollout connects to may not
_NAME_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_ADDR_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME = re.compile(rf"{_NAME_LABEL}(?:\.{_NAME_LABEL})*")
_HOST_ADDR = re.compile(rf"{_ADDR_LABEL}(?:\.{_ADDR_LABEL})*")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def valid_host_name(name: str) -> bool:
    return len(name) <= 253 and (_is_ip(name) or bool(_HOST_NAME.fullmatch(name)))


def valid_address(addr: str) -> bool:
    return len(addr) <= 253 and (_is_ip(addr) or bool(_HOST_ADDR.fullmatch(addr)))


def _check_identity(host: Host) -> None:
    """A host's name becomes a file name, a kubectl argument and (without ansible_host) the
    address dialled: '.', '..', '-n', '--help' or '-oProxyCommand=...' must not get there."""
    if not valid_host_name(host.name):
        raise InputError(f"host {host.name!r}: not a valid host name (RFC 1123 labels of letters, digits, "
                         "'-' and '_', not starting with '-', or an IP address)",
                         path=host.origin.path, line=host.origin.line)
    for var in ("ansible_host", "ansible_ssh_host"):
        if var in host.vars:
            v = host.vars[var]
            if not (isinstance(v, str) and valid_address(v)):
                o = host.var_origins.get(var, host.origin)
                raise InputError(f"host {host.name}: {var} {v!r} is not a host name (RFC 1123) or IP address",
                                 path=o.path, line=o.line)
    if "ansible_host" not in host.vars and "ansible_ssh_host" not in host.vars and not valid_address(host.name) \
            and dialled_by_name(host.vars):
        raise InputError(f"host {host.name!r} is dialled by its name, which is not a host name (RFC 1123) or IP "
                         "address: give it an ansible_host", path=host.origin.path, line=host.origin.line)


# --- sources: what -i names -----------------------------------------------------------------

_IGNORED = re.compile(r"^\.|^host_vars$|^group_vars$|^vars_plugins$|(\.pyc|\.pyo|\.swp|\.bak|~|\.rpm|\.md|\.txt|"
                      r"\.rst|\.orig|\.cfg|\.retry)$")
_VARS_SUFFIXES = ("", ".yml", ".yaml", ".json")
_RANGE = re.compile(r"\[([0-9]+|[A-Za-z]):([0-9]+|[A-Za-z])(?::([0-9]*))?\]")


def _files_under(path: Path) -> list[Path]:
    """Every file a source holds (itself, or what a directory holds), refusing FIFOs and devices."""
    if path.is_dir():
        out: list[Path] = []
        for entry in sorted(path.rglob("*")):
            if not entry.is_dir():
                check_regular_file(entry)
                out.append(entry)
        return out
    check_regular_file(path)
    return [path]


def _vars_dirs(base: Path) -> list[Path]:
    return [d for d in (base / "group_vars", base / "host_vars") if d.is_dir()]


def _range_size(token_ranges: list[tuple[str, str, str | None]]) -> int:
    n = 1
    for beg, end, step in token_ranges:
        st = int(step) if step else 1
        if beg.isdigit() and end.isdigit():
            span = int(end) - int(beg)
        else:
            span = ord(end) - ord(beg)
        n *= max(0, span) // max(st, 1) + 1
    return n


MAX_RANGE_HOSTS = 100_000


def _prescan(files: list[Path]) -> None:
    """What Ansible would hang or die on, refused first with file and line: text that is not
    UTF-8, YAML alias bombs, host ranges of more than MAX_RANGE_HOSTS hosts."""
    for f in files:
        if f.stat().st_size > 64 << 20:
            raise InputError("larger than 64 MiB; refused as an inventory file", path=str(f))
        raw = f.read_bytes()
        if raw.startswith(b"$ANSIBLE_VAULT") or raw.startswith(b"\x7fELF") or os.access(f, os.X_OK):
            continue                # vault-encrypted, or an inventory script: Ansible runs it
        text = decode_utf8(raw, str(f))
        for no, line in enumerate(text.splitlines(), 1):
            for tok in re.findall(r"[^\s'\"]*\[[^\s'\"]*", line):
                ranges = _RANGE.findall(tok)
                if ranges and _range_size(ranges) > MAX_RANGE_HOSTS:
                    raise InputError(f"host range {tok.rstrip(':')!r} expands to {_range_size(ranges):,} hosts, more "
                                     f"than {MAX_RANGE_HOSTS:,}; refused", path=str(f), line=no)
        if f.suffix in (".yml", ".yaml", ".json", "") and "&" in text and "*" in text:
            try:
                load_yaml_text(text, str(f))
            except InputError as exc:
                if "alias" in str(exc):
                    raise
                # not YAML (an INI file, say): Ansible says what is wrong with it


def _digest(files: list[Path], single: Path | None) -> str:
    if single is not None:
        return hashlib.sha256(single.read_bytes()).hexdigest()
    h = hashlib.sha256()
    for f in sorted(set(files)):
        h.update(f"{f.resolve()}\0{hashlib.sha256(f.read_bytes()).hexdigest()}\n".encode())
    return h.hexdigest()


def _native_file(sources: list[str], playbook_dir: str | None) -> Path | None:
    """The one YAML file this module resolves exactly as ansible-inventory does (proved by
    tests/e2e/test_ansible_inventory.py), or None: then ansible-inventory resolves it."""
    if len(sources) != 1:
        return None
    p = Path(sources[0])
    if p.is_dir():
        entries = [e for e in sorted(p.iterdir()) if not _IGNORED.search(e.name)]
        if len(entries) != 1:
            return None
        p = entries[0]
    if not p.is_file() or p.suffix not in (".yml", ".yaml") or os.access(p, os.X_OK):
        return None
    text = p.read_bytes()
    if b"!vault" in text or b"$ANSIBLE_VAULT" in text or re.search(rb"(?m)^plugin\s*:", text):
        return None
    for d in _vars_dirs(p.parent):
        for f in d.rglob("*"):
            if f.is_file() and f.read_bytes()[:1024].lstrip().startswith(b"$ANSIBLE_VAULT") \
                    or f.is_file() and b"!vault" in f.read_bytes():
                return None
    if playbook_dir:
        pb = Path(playbook_dir).resolve()
        if pb != p.parent.resolve() and _vars_dirs(pb):
            return None
    return p


def load_inventory(source: str | Path | list[str] | tuple[str, ...], *, playbook_dir: str | Path | None = None,
                   vault: VaultOptions | None = None, resolver: str = "auto") -> Inventory:
    """Resolve what ``-i`` names, as ``ansible-inventory --list`` does.

    ``source``: one path or several (files, directories, plugin configs, scripts, or an
    Ansible host list ``a,b,``). ``playbook_dir``: where the playbook is (its group_vars/
    and host_vars/ apply too). ``resolver``: "auto" (this module for the YAML files it is
    proved identical on, ansible-inventory for everything else), "ansible" or "native".
    """
    sources = [str(s) for s in (source if isinstance(source, (list, tuple)) else [source])]
    if not sources:
        raise InputError("no inventory given (-i)")
    files: list[Path] = []
    for s in sources:
        p = Path(s)
        if not os.path.lexists(p):
            if "," in s:            # an Ansible host list: "gpu-01,gpu-02,"
                continue
            raise InputError("file not found", path=s)
        files += _files_under(p)
        files += [f for d in _vars_dirs(p if p.is_dir() else p.parent) for f in _files_under(d)]
    if playbook_dir:
        files += [f for d in _vars_dirs(Path(playbook_dir)) for f in _files_under(d)]
    pb_dir = str(playbook_dir) if playbook_dir else None
    native = _native_file(sources, pb_dir) if resolver != "ansible" else None
    if native is None and resolver == "native":
        raise InputError("this inventory needs ansible-inventory to resolve it", path=", ".join(sources))
    unparsed: NotYamlInventory | None = None
    if native is not None:
        try:
            inv = _load_native(native)
        except NotYamlInventory as exc:
            if resolver == "native":
                raise
            unparsed = exc              # what ansible-inventory resolves, k3rollout resolves the same way
        else:
            inv = replace(inv, sources=tuple(sources), sha256=_digest(files, native))
    if native is None or unparsed is not None:
        _prescan(files)
        single = Path(sources[0]) if len(sources) == 1 and Path(sources[0]).is_file() else None
        try:
            inv = _from_ansible(sources, pb_dir, vault, _digest(files, single) if files else "")
        except InputError as exc:
            if unparsed is None:
                raise
            # neither reader parses it: the YAML reader's error names the line
            why = ("ansible-inventory, which tries each of its inventory plugins, cannot parse it either"
                   if exc.message.startswith("ansible-inventory cannot resolve") else exc.message)
            raise InputError(f"{unparsed.message}; {why}", path=unparsed.path, line=unparsed.line) from None
    for h in inv.hosts.values():
        _check_identity(h)
    return replace(inv, playbook_dir=str(Path(playbook_dir).resolve()) if playbook_dir else None,
                   vault_password_files=tuple(str(Path(f).resolve()) for f in (vault.password_files if vault else [])))


def _from_ansible(sources: list[str], playbook_dir: str | None, vault: VaultOptions | None,
                  digest: str) -> Inventory:
    data = ai.resolve(sources, playbook_dir=playbook_dir, vault=vault)
    meta = data.get("_meta", {}) if isinstance(data.get("_meta"), dict) else {}
    hostvars = meta.get("hostvars", {}) or {}
    ghosts, gchildren = ai.group_tree(data)
    where = sources[0] if len(sources) == 1 else ", ".join(sources)
    origin = Origin(where, None)
    groups: dict[str, Group] = {}
    for name in ghosts:
        groups[name] = Group(name=name, hosts=list(ghosts[name]), children=list(gchildren[name]), origin=origin)
    for name, g in groups.items():
        for c in g.children:
            if name not in groups[c].parents:
                groups[c].parents.append(name)
    if "ungrouped" not in groups["all"].children:
        groups["all"].children.insert(0, "ungrouped")
        groups["ungrouped"].parents.append("all")
    inv0 = Inventory(path=where, hosts={}, groups=groups)
    order = inv0.group_hosts("all")
    order += [h for h in hostvars if h not in order]
    dec = ai.Decryptor(vault)
    depth = _depths(groups)
    hosts: dict[str, Host] = {}
    for h in order:
        raw = hostvars.get(h, {}) or {}
        v = {k: dec.open(val, f"host {h}: variable {k}") for k, val in raw.items()}
        v.setdefault("inventory_hostname", h)
        mine = [g for g, members in ghosts.items() if h in members]
        acc, stack = set(mine), list(mine)
        while stack:
            for par in groups[stack.pop()].parents:
                if par not in acc:
                    acc.add(par)
                    stack.append(par)
        acc.discard("all")
        hosts[h] = Host(name=h, vars=v, groups=tuple(sorted(acc, key=lambda g: (depth.get(g, 1), g))),
                        origin=origin)
        _check_known_vars(hosts[h])
    if not hosts:
        raise InputError("inventory defines no hosts", path=where)
    _check_scheduler_hosts(hosts)
    return Inventory(path=where, hosts=hosts, groups=groups, sources=tuple(sources), resolver="ansible",
                     sha256=digest, ansible_json=data, vault_values=tuple(sorted(dec.opened)))


# Ansible's own default connection: a host the inventory gives no ``ansible_connection`` is
# dialled over SSH. Only ``ansible_connection: k3sim`` (the shipped sim inventory sets it)
# makes a host simulated, so a real inventory can never run against the simulator unawares.
DEFAULT_CONNECTION = "ssh"


# the connections k3rollout drives itself (transport/factory.py); a registered transport adds its own
BUILT_IN_CONNECTIONS = ("ssh", "paramiko", "local")


def connection_of(host_vars: dict[str, Any]) -> str:
    """The host's connection as Ansible resolves it (``ssh`` when the inventory is silent)."""
    return str(host_vars.get("ansible_connection") or DEFAULT_CONNECTION)


def of_registered_transport(host_vars: dict[str, Any]) -> bool:
    """Whether a registered transport (k3rollout/plugins.py), not SSH, reaches the host."""
    return transport_plugin(connection_of(host_vars)) is not None


def dialled_by_name(host_vars: dict[str, Any]) -> bool:
    """Whether a host without ``ansible_host`` is reached at its inventory name: over SSH it
    is; ``local`` and a registered transport reach it their own way."""
    return connection_of(host_vars) != "local" and not of_registered_transport(host_vars)


def declared_out_of_service(hv: dict[str, Any]) -> bool:
    """A host the inventory itself says serves nothing before the run: ``serving: false``
    (the operator's word), or a host of a registered transport (the simulator's,
    ``ansible_connection: k3sim``) that the transport builds out of service from its vars,
    which is what a preflight would read from it (k3rollout/plugins.py)."""
    if hv.get("serving") is False:
        return True
    plugin = transport_plugin(connection_of(hv))
    return plugin is not None and plugin.out_of_service(hv)
