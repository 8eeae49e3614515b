"""Resolve how to reach a host over SSH, as Ansible and OpenSSH would, once for both transports.

The inputs, in Ansible's precedence (a host variable beats the environment, which beats
``ansible.cfg``; of two names for one setting the later-listed alias wins, as in
ansible-core's ssh connection plugin):

* host variables: ``ansible_host``/``ansible_ssh_host``, ``ansible_port``/``ansible_ssh_port``,
  ``ansible_user``/``ansible_ssh_user``, ``ansible_password``/``ansible_ssh_pass``/
  ``ansible_ssh_password``, ``ansible_private_key_file``/``ansible_ssh_private_key_file``,
  ``ansible_ssh_args``, ``ansible_ssh_common_args``, ``ansible_ssh_extra_args``,
  ``ansible_host_key_checking``/``ansible_ssh_host_key_checking``, ``ansible_ssh_timeout``,
  ``ansible_become``, ``ansible_become_user``/``ansible_sudo_user``, ``ansible_become_method``,
  ``ansible_become_password``/``ansible_become_pass``/``ansible_sudo_pass``;
  plus ``k3_known_hosts_file`` and ``k3_connect_timeout``;
* ``ANSIBLE_*`` environment variables of the same settings;
* ``ansible.cfg``, the first found of ``$ANSIBLE_CONFIG``, ``./ansible.cfg`` (not in a
  world-writable directory), ``~/.ansible.cfg``, ``/etc/ansible/ansible.cfg``;
* then, as the ``ssh`` command line Ansible builds would (the first value of an option wins,
  the command line before the config files): the ssh arguments, ``~/.ssh/config`` (or ``-F``)
  and ``/etc/ssh/ssh_config``, read with paramiko's ``SSHConfig``: Host aliases, HostName,
  User, Port, IdentityFile, IdentitiesOnly, ProxyJump chains, ProxyCommand, Include,
  UserKnownHostsFile, GlobalKnownHostsFile, StrictHostKeyChecking, ConnectTimeout.

Host keys are always checked strictly, on every hop. A setting that would lower that
(``host_key_checking = False``, ``StrictHostKeyChecking no`` or ``accept-new``) is refused
with the host and where the setting came from, before any node is touched: both transports
then decide every host key the same way, from the same known_hosts files.
``render_openssh_config`` writes the resolved settings as an ``ssh_config`` for the
Ansible path, so OpenSSH reaches the same address, through the same hops, as paramiko.
"""

from __future__ import annotations

import configparser
import getpass
import glob
import os
import re
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paramiko
from paramiko.hostkeys import HostKeyEntry, InvalidHostKey

from k3rollout.errors import InputError

ANSIBLE_SSH_ARGS_DEFAULT = "-C -o ControlMaster=auto -o ControlPersist=60s"
DEFAULT_KEYS = ("~/.ssh/id_rsa", "~/.ssh/id_ecdsa", "~/.ssh/id_ecdsa_sk", "~/.ssh/id_ed25519", "~/.ssh/id_ed25519_sk")
MAX_HOPS = 8

_TRUE = {"y", "yes", "on", "1", "true", "t"}
_FALSE = {"n", "no", "off", "0", "false", "f"}
# ssh(1) flags that take an argument and that this module has no use for
_FLAGS_WITH_ARG = set("bBcDeEIiJlLmOopQRSwWF")
_SSH_FLAG_TO_OPTION = {"i": "identityfile", "J": "proxyjump", "l": "user", "p": "port"}
# options that would make the two transports check host keys differently: refused
_UNSUPPORTED = {"hostkeyalias": "HostKeyAlias", "knownhostscommand": "KnownHostsCommand"}


def boolean(value: Any, what: str) -> bool:
    """Ansible's ``boolean()``: yes/no, on/off, true/false, 1/0, y/n, t/f."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InputError(f"{what}: {value!r} is not a boolean (use true or false)")


def ansible_cfg_path(env: Mapping[str, str] | None = None) -> Path | None:
    """The ansible.cfg Ansible would read: the first found of $ANSIBLE_CONFIG (a directory
    means its ansible.cfg), ./ansible.cfg unless the directory is world-writable,
    ~/.ansible.cfg, /etc/ansible/ansible.cfg (ansible-core's ``find_ini_config_file``)."""
    env = os.environ if env is None else env
    paths: list[Path] = []
    if "ANSIBLE_CONFIG" in env:
        p = Path(os.path.expanduser(env["ANSIBLE_CONFIG"]))
        paths.append(p / "ansible.cfg" if p.is_dir() else p)
    try:
        cwd = Path.cwd()
        if not cwd.stat().st_mode & stat.S_IWOTH:
            paths.append(cwd / "ansible.cfg")
    except OSError:
        pass
    paths += [Path(os.path.expanduser("~/.ansible.cfg")), Path("/etc/ansible/ansible.cfg")]
    for p in paths:
        if p.exists() and os.access(p, os.R_OK):
            return p
    return None


@dataclass(frozen=True)
class AnsibleCfg:
    path: Path | None
    parser: configparser.ConfigParser | None

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None) -> AnsibleCfg:
        path = ansible_cfg_path(env)
        if path is None:
            return cls(None, None)
        parser = configparser.ConfigParser(inline_comment_prefixes=(";",), interpolation=None)
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read ansible.cfg ({exc})", path=str(path)) from None
        return cls(path, parser)

    def get(self, *entries: tuple[str, str]) -> tuple[str, str] | None:
        """The value of the last of ``(section, key)`` entries that is set (Ansible's order)."""
        found = None
        for section, key in entries:
            if self.parser is not None and self.parser.has_option(section, key):
                found = (self.parser.get(section, key), f"{self.path} [{section}] {key}")
        return found


def _setting(v: Mapping[str, Any], env: Mapping[str, str], cfg: AnsibleCfg, var_names: tuple[str, ...],
             env_names: tuple[str, ...] = (), ini: tuple[tuple[str, str], ...] = ()) -> tuple[Any, str] | None:
    """A connection setting in Ansible's precedence: vars, then environment, then ansible.cfg."""
    found = None
    for n in var_names:
        if v.get(n) is not None:
            found = (v[n], f"host variable {n}")
    if found is None:
        for n in env_names:
            if env.get(n) is not None:
                found = (env[n], f"environment variable {n}")
    if found is None:
        found = cfg.get(*ini)
    return found


def parse_ssh_args(text: str, source: str) -> list[tuple[str, str, str]]:
    """``ssh`` command-line arguments as ``(option, value, source)``, in order. ``-o K=V``,
    ``-oK=V``, ``-o "K V"``, ``-i``, ``-J``, ``-l``, ``-p`` and ``-F`` are kept; other flags are
    skipped with their argument."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise InputError(f"{source}: cannot split {text!r} ({exc})") from None
    out: list[tuple[str, str, str]] = []
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if not w.startswith("-") or len(w) < 2:
            continue
        flag, rest = w[1], w[2:]
        if flag not in _FLAGS_WITH_ARG:
            continue
        if not rest:
            if i >= len(words):
                raise InputError(f"{source}: {w} needs a value")
            rest = words[i]
            i += 1
        if flag == "o":
            m = re.match(r"\s*([A-Za-z0-9]+)\s*(?:=\s*|\s+)(.*)$", rest)
            if not m:
                raise InputError(f"{source}: cannot read the ssh option {rest!r}")
            value = m.group(2).strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            out.append((m.group(1).lower(), value, source))
        elif flag == "F":
            out.append(("__configfile", rest, source))
        elif flag in _SSH_FLAG_TO_OPTION:
            out.append((_SSH_FLAG_TO_OPTION[flag], rest, source))
    return out


@dataclass(frozen=True)
class Hop:
    """One SSH endpoint: the target, or a jump host on the way to it."""

    alias: str                     # the name given to ssh (a Host pattern may match it)
    address: str                   # HostName: what is connected to, and the known_hosts name
    port: int
    user: str
    key_files: tuple[str, ...]
    allow_agent: bool
    look_for_keys: bool
    proxy_command: str | None = None
    jumps: tuple[Hop, ...] = ()

    @property
    def endpoint(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"


@dataclass(frozen=True)
class Resolved:
    hop: Hop
    known_hosts: tuple[str, ...]
    password: str | None
    connect_timeout: float
    become: bool
    become_user: str | None
    become_password: str | None
    config_files: tuple[str, ...] = field(default=())


def _with_includes(path: Path, depth: int) -> str:
    """The file's text with each ``Include`` replaced by the files it names, in place (ssh(1)
    reads them there; relative names are under ~/.ssh, or /etc/ssh for the system file).
    paramiko's SSHConfig does not read Include itself."""
    if depth > 16:
        raise InputError("ssh config: Include nested more than 16 deep", path=str(path))
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s*include(?:\s*=\s*|\s+)(.+)$", line, re.I)
        if not m:
            out.append(line)
            continue
        base = Path("/etc/ssh") if str(path).startswith("/etc/ssh/") else Path(os.path.expanduser("~/.ssh"))
        for pattern in shlex.split(m.group(1)):
            pattern = os.path.expanduser(pattern)
            full = pattern if os.path.isabs(pattern) else str(base / pattern)
            for f in sorted(glob.glob(full)):
                if Path(f).is_file():
                    out.append(_with_includes(Path(f), depth + 1))
    return "\n".join(out) + "\n"


class _SSHFiles:
    """ssh_config files, parsed once per path with paramiko's SSHConfig."""

    def __init__(self) -> None:
        self._cache: dict[str, paramiko.SSHConfig | None] = {}

    def get(self, path: str) -> paramiko.SSHConfig | None:
        if path not in self._cache:
            p = Path(os.path.expanduser(path))
            if not p.is_file():
                self._cache[path] = None
            else:
                try:
                    self._cache[path] = paramiko.SSHConfig.from_text(_with_includes(p, 0))
                except (OSError, UnicodeDecodeError, paramiko.ssh_exception.ConfigParseError, ValueError) as exc:
                    raise InputError(f"cannot read ssh config ({exc})", path=str(p)) from None
        return self._cache[path]

    def lookup(self, files: list[str], alias: str) -> list[tuple[str, Any, str]]:
        """Options for ``alias`` from each file in order, as ``(option, value, source)``."""
        out: list[tuple[str, Any, str]] = []
        for f in files:
            c = self.get(f)
            if c is None:
                continue
            try:
                found = c.lookup(alias)
            except Exception as exc:  # noqa: BLE001 - paramiko raises several kinds for a bad Match/token
                raise InputError(f"ssh config: cannot look up {alias!r} ({exc})", path=f) from None
            hostname_default = found.get("hostname") == alias
            for k, val in found.items():
                if k == "hostname" and hostname_default:
                    continue
                out.append((k, val, f"{os.path.expanduser(f)} (Host {alias})"))
        return out


def _first(opts: list[tuple[str, Any, str]], key: str) -> tuple[Any, str] | None:
    for k, val, src in opts:
        if k == key:
            return val, src
    return None


def _all(opts: list[tuple[str, Any, str]], key: str) -> list[str]:
    out: list[str] = []
    for k, val, _ in opts:
        if k == key:
            out += val if isinstance(val, list) else [val]
    return out


def _check_strictness(opts: list[tuple[str, Any, str]], host: str, who: str) -> None:
    for key, name in _UNSUPPORTED.items():
        found = _first(opts, key)
        if found is not None:
            raise InputError(f"host {host}: {name} {found[0]!r} ({found[1]}{who}) is not supported: k3rollout "
                             "checks host keys by the HostName in known_hosts, on both of its transports")
    found = _first(opts, "stricthostkeychecking")
    if found is not None and str(found[0]).lower() not in ("yes", "true", "ask"):
        raise InputError(f"host {host}: StrictHostKeyChecking {found[0]} ({found[1]}{who}) would lower host-key "
                         "checking; k3rollout checks every host key strictly against known_hosts and never "
                         "lowers it. Remove that setting, or override it with ansible_ssh_common_args: "
                         "'-o StrictHostKeyChecking=yes'. Nothing was changed.")


def _expand_tokens(text: str, hop_host: str, port: int, user: str) -> str:
    table = {"h": hop_host, "p": str(port), "r": user, "%": "%"}
    return re.sub(r"%(.)", lambda m: table.get(m.group(1), m.group(0)), text)


def _parse_jump(spec: str, host: str, source: str) -> tuple[str, str | None, int | None]:
    s = spec.strip()
    if s.startswith("ssh://"):
        s = s[6:]
    user = None
    if "@" in s:
        user, s = s.rsplit("@", 1)
    port = None
    m = re.match(r"^\[(.+)\](?::(\d+))?$", s) or re.match(r"^([^:]+)(?::(\d+))?$", s)
    if not m or not m.group(1):
        raise InputError(f"host {host}: cannot read the jump host {spec!r} ({source})")
    if m.group(2):
        port = int(m.group(2))
    return m.group(1), user, port


class Resolver:
    def __init__(self, env: Mapping[str, str] | None = None, cfg: AnsibleCfg | None = None):
        self.env = os.environ if env is None else env
        self.cfg = AnsibleCfg.load(self.env) if cfg is None else cfg
        self.files = _SSHFiles()

    def _hop(self, host: str, alias: str, cmdline: list[tuple[str, Any, str]], files: list[str],
             depth: int, jump_override: tuple[Hop, ...] | None, who: str) -> Hop:
        if depth > MAX_HOPS:
            raise InputError(f"host {host}: more than {MAX_HOPS} jump hosts (a ProxyJump loop?)")
        opts = cmdline + self.files.lookup(files, alias)
        _check_strictness(opts, host, who)
        hostname = _first(opts, "hostname")
        address = str(hostname[0]) if hostname else alias
        if hostname and "%h" in address:
            address = address.replace("%h", alias)
        port_v = _first(opts, "port")
        port = 22
        if port_v is not None:
            try:
                port = int(port_v[0])
            except ValueError:
                raise InputError(f"host {host}: port {port_v[0]!r} ({port_v[1]}) is not a number") from None
        user_v = _first(opts, "user")
        user = str(user_v[0]) if user_v else getpass.getuser()
        keys = [os.path.expanduser(k) for k in _all(opts, "identityfile")]
        only = _first(opts, "identitiesonly")
        identities_only = only is not None and str(only[0]).lower() in ("yes", "true")
        proxy_command = None
        jumps: tuple[Hop, ...] = ()
        pj, pc = _first(opts, "proxyjump"), _first(opts, "proxycommand")
        if jump_override is not None:
            jumps = jump_override
        elif pj is not None and pc is not None and str(pj[0]).lower() != "none" and str(pc[0]).lower() != "none":
            if pj[1] == pc[1]:
                raise InputError(f"host {host}: both ProxyJump and ProxyCommand apply ({pj[1]}); keep one")
            # ssh(1): whichever comes first wins; the command line comes before the files
            first = next(k for k, _, _ in opts if k in ("proxyjump", "proxycommand"))
            pc, pj = (None, pj) if first == "proxyjump" else (pc, None)
        if jump_override is None and pj is not None and str(pj[0]).lower() != "none":
            jumps = self._jumps(host, str(pj[0]), pj[1], files, depth,
                                [o for o in cmdline if o[0] == "stricthostkeychecking"][:1])
        elif jump_override is None and pc is not None and str(pc[0]).lower() != "none":
            proxy_command = _expand_tokens(str(pc[0]), address, port, user)
        return Hop(alias=alias, address=address, port=port, user=user, key_files=tuple(keys),
                   allow_agent=not identities_only, look_for_keys=not keys, proxy_command=proxy_command,
                   jumps=jumps)

    def _jumps(self, host: str, spec: str, source: str, files: list[str], depth: int,
               strict_cmd: list[tuple[str, Any, str]]) -> tuple[Hop, ...]:
        """ProxyJump ``a,b,c``: ``a`` is reached by its own settings, each later one through the one before."""
        chain: list[Hop] = []
        for i, part in enumerate(spec.split(",")):
            jalias, juser, jport = _parse_jump(part, host, source)
            # an explicit StrictHostKeyChecking on the command line holds for the jump hosts too
            cmd: list[tuple[str, Any, str]] = [o for o in strict_cmd]
            if juser:
                cmd.insert(0, ("user", juser, source))
            if jport:
                cmd.insert(0, ("port", jport, source))
            chain.append(self._hop(host, jalias, cmd, files, depth + 1, None if i == 0 else tuple(chain[-1:]),
                                   f", jump host {jalias}"))
        # each hop carries the one before it, so the last one is the whole chain
        return (chain[-1],)

    def resolve(self, name: str, v: Mapping[str, Any]) -> Resolved:
        env, cfg = self.env, self.cfg
        hk = _setting(v, env, cfg, ("ansible_host_key_checking", "ansible_ssh_host_key_checking"),
                      ("ANSIBLE_HOST_KEY_CHECKING", "ANSIBLE_SSH_HOST_KEY_CHECKING"),
                      (("defaults", "host_key_checking"), ("ssh_connection", "host_key_checking")))
        if str(v.get("ansible_connection", "")) in ("paramiko", "ansible.builtin.paramiko_ssh", "paramiko_ssh"):
            # Ansible's paramiko connection has names of its own for the same setting
            phk = _setting(v, env, cfg, ("ansible_host_key_checking", "ansible_ssh_host_key_checking",
                                         "ansible_paramiko_host_key_checking"),
                           ("ANSIBLE_HOST_KEY_CHECKING", "ANSIBLE_SSH_HOST_KEY_CHECKING",
                            "ANSIBLE_PARAMIKO_HOST_KEY_CHECKING"),
                           (("defaults", "host_key_checking"), ("paramiko_connection", "host_key_checking")))
            hk = phk if phk is not None and not boolean(phk[0], f"host {name}: {phk[1]}") else hk
        if hk is not None and not boolean(hk[0], f"host {name}: {hk[1]}"):
            raise InputError(f"host {name}: host-key checking is turned off by {hk[1]} = {hk[0]!r}; k3rollout "
                             "checks every host key strictly against known_hosts, on both of its transports, and "
                             "never lowers that: remove the setting (or set it to true) and add the hosts' "
                             "verified keys to known_hosts. Nothing was changed.")
        host_v = _setting(v, {}, AnsibleCfg(None, None), ("ansible_host", "ansible_ssh_host"))
        address = str(host_v[0]) if host_v else name
        port = _setting(v, env, cfg, ("ansible_port", "ansible_ssh_port"), ("ANSIBLE_REMOTE_PORT",),
                        (("defaults", "remote_port"),))
        user = _setting(v, env, cfg, ("ansible_user", "ansible_ssh_user"), ("ANSIBLE_REMOTE_USER",),
                        (("defaults", "remote_user"),))
        key = _setting(v, env, cfg, ("ansible_private_key_file", "ansible_ssh_private_key_file"),
                       ("ANSIBLE_PRIVATE_KEY_FILE",), (("defaults", "private_key_file"),))
        ssh_args = _setting(v, env, cfg, ("ansible_ssh_args",), ("ANSIBLE_SSH_ARGS",), (("ssh_connection", "ssh_args"),))
        common = _setting(v, env, cfg, ("ansible_ssh_common_args",), ("ANSIBLE_SSH_COMMON_ARGS",),
                          (("ssh_connection", "ssh_common_args"),))
        extra = _setting(v, env, cfg, ("ansible_ssh_extra_args",), ("ANSIBLE_SSH_EXTRA_ARGS",),
                         (("ssh_connection", "ssh_extra_args"),))
        # the ssh command line, in the order ansible-core's ssh plugin builds it
        cmdline: list[tuple[str, Any, str]] = []
        cmdline += parse_ssh_args(str(ssh_args[0]) if ssh_args else ANSIBLE_SSH_ARGS_DEFAULT,
                                  ssh_args[1] if ssh_args else "Ansible's default ssh_args")
        if port is not None:
            try:
                cmdline.append(("port", int(port[0]), port[1]))
            except (TypeError, ValueError):
                raise InputError(f"host {name}: {port[1]} = {port[0]!r} is not a port number") from None
        if key is not None:
            path = os.path.expanduser(str(key[0]))
            if not Path(path).is_file():
                raise InputError(f"host {name}: {key[1]} names {path}, which does not exist")
            cmdline.append(("identityfile", path, key[1]))
        if user is not None:
            cmdline.append(("user", str(user[0]), user[1]))
        for args in (common, extra):
            if args is not None and str(args[0]).strip():
                cmdline += parse_ssh_args(str(args[0]), args[1])
        cfile = _first(cmdline, "__configfile")
        files = [str(cfile[0])] if cfile else ["~/.ssh/config", "/etc/ssh/ssh_config"]
        if cfile and not Path(os.path.expanduser(str(cfile[0]))).is_file():
            raise InputError(f"host {name}: ssh -F {cfile[0]} ({cfile[1]}): no such file")
        hop = self._hop(name, address, cmdline, files, 0, None, "")
        opts = cmdline + self.files.lookup(files, address)
        # known_hosts: k3_known_hosts_file, else UserKnownHostsFile, plus GlobalKnownHostsFile
        if v.get("k3_known_hosts_file"):
            known = [os.path.expanduser(str(v["k3_known_hosts_file"]))]
            if not Path(known[0]).is_file():
                raise InputError(f"host {name}: known_hosts file {known[0]} (k3_known_hosts_file) does not exist; "
                                 "strict host key checking needs it")
        else:
            ukh = _first(opts, "userknownhostsfile")
            gkh = _first(opts, "globalknownhostsfile")
            user_files = str(ukh[0]).split() if ukh else ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"]
            global_files = str(gkh[0]).split() if gkh else ["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"]
            known = [os.path.expanduser(f) for f in user_files + global_files
                     if f != "none" and Path(os.path.expanduser(f)).is_file()]
            if not known:
                raise InputError(f"host {name}: no known_hosts file exists ({', '.join(user_files + global_files)}); "
                                 "strict host key checking needs one (or set k3_known_hosts_file)")
        password = _setting(v, env, cfg, ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password"))
        timeout = (v.get("k3_connect_timeout") or (_first(opts, "connecttimeout") or (None,))[0]
                   or (_setting(v, env, cfg, ("ansible_ssh_timeout",), ("ANSIBLE_TIMEOUT", "ANSIBLE_SSH_TIMEOUT"),
                                (("defaults", "timeout"), ("ssh_connection", "timeout"))) or (None,))[0] or 10)
        become = _setting(v, env, cfg, ("ansible_become",), ("ANSIBLE_BECOME",), (("privilege_escalation", "become"),))
        become_on = boolean(become[0], f"host {name}: {become[1]}") if become else False
        method = _setting(v, env, cfg, ("ansible_become_method",), ("ANSIBLE_BECOME_METHOD",),
                          (("privilege_escalation", "become_method"),))
        if become_on and method is not None and str(method[0]) not in ("sudo", "ansible.builtin.sudo"):
            raise InputError(f"host {name}: {method[1]} = {method[0]!r}: k3rollout becomes another user with sudo "
                             "only")
        buser = _setting(v, env, cfg, ("ansible_become_user", "ansible_sudo_user"),
                         ("ANSIBLE_BECOME_USER", "ANSIBLE_SUDO_USER"),
                         (("privilege_escalation", "become_user"), ("sudo_become_plugin", "user")))
        bpass = _setting(v, env, cfg, ("ansible_become_password", "ansible_become_pass", "ansible_sudo_pass"),
                         ("ANSIBLE_BECOME_PASS", "ANSIBLE_SUDO_PASS"), (("sudo_become_plugin", "password"),))
        try:
            connect_timeout = float(timeout)
        except (TypeError, ValueError):
            raise InputError(f"host {name}: connect timeout {timeout!r} is not a number") from None
        return Resolved(hop=hop, known_hosts=tuple(known), password=str(password[0]) if password else None,
                        connect_timeout=connect_timeout, become=become_on,
                        become_user=str(buser[0]) if buser else None,
                        become_password=str(bpass[0]) if bpass and bpass[0] else None,
                        config_files=tuple(files))


def hops_of(hop: Hop) -> list[Hop]:
    """The chain to ``hop``, first jump first, ``hop`` last."""
    chain = [hop]
    while chain[0].jumps:
        chain.insert(0, chain[0].jumps[0])
    return chain


def _q(value: str) -> str:
    if not value or any(c in value for c in ' \t"#'):
        if '"' in value:
            raise InputError(f"cannot write {value!r} into an ssh_config for OpenSSH (it holds a double quote)")
        return f'"{value}"'
    return value


def render_openssh_config(r: Resolved, control_dir: str | None = None) -> tuple[str, str]:
    """The resolved settings as an ssh_config for OpenSSH (``ssh -F``): one Host block per hop,
    each with the same address, port, user, keys, proxy and known_hosts files paramiko uses,
    and StrictHostKeyChecking yes. Returns the text and the Host name of the target."""
    lines = ["# written by k3rollout: the settings its paramiko transport resolved for this host", ""]
    chain = hops_of(r.hop)
    kh = " ".join(_q(k) for k in r.known_hosts)
    for i, h in enumerate(chain):
        alias = f"k3hop{i}" if i < len(chain) - 1 else "k3target"
        lines += [f"Host {alias}", f"  HostName {_q(h.address)}", f"  Port {h.port}", f"  User {_q(h.user)}",
                  f"  UserKnownHostsFile {kh}", "  GlobalKnownHostsFile none", "  StrictHostKeyChecking yes",
                  "  CheckHostIP no", "  BatchMode yes", "  UpdateHostKeys no",
                  f"  ConnectTimeout {max(1, int(r.connect_timeout))}"]
        for k in h.key_files:
            lines.append(f"  IdentityFile {_q(k.replace('%', '%%'))}")
        if not h.allow_agent:
            lines.append("  IdentitiesOnly yes")
        if i > 0:
            lines.append(f"  ProxyJump k3hop{i - 1}")
        elif h.proxy_command:
            lines.append(f"  ProxyCommand {h.proxy_command.replace('%', '%%')}")
        lines.append("")
    return "\n".join(lines), "k3target"


_KNOWN_CACHE: dict[tuple[str, int, int], tuple[list[HostKeyEntry], set[tuple[str, str]]]] = {}


def _read_known_hosts(f: str) -> tuple[list[HostKeyEntry], set[tuple[str, str]]]:
    try:
        st = os.stat(f)
    except OSError:
        return [], set()
    key = (f, st.st_mtime_ns, st.st_size)
    if key not in _KNOWN_CACHE:
        entries: list[HostKeyEntry] = []
        revoked: set[tuple[str, str]] = set()
        for line in Path(f).read_text(errors="replace").splitlines():
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if parts[0].startswith("@"):
                # markers: paramiko cannot read these lines. @revoked keys are refused below;
                # @cert-authority host certificates are not accepted (stricter than ssh)
                if parts[0] == "@revoked" and len(parts) >= 4:
                    revoked.add((parts[2], parts[3]))
                continue
            try:
                e = HostKeyEntry.from_line(line)
            except (InvalidHostKey, ValueError, paramiko.SSHException):
                e = None            # ssh(1) skips a line it cannot read, too
            if e is not None:
                entries.append(e)
        _KNOWN_CACHE[key] = (entries, revoked)
    return _KNOWN_CACHE[key]


def load_known_hosts(files: tuple[str, ...], into: paramiko.HostKeys) -> set[tuple[str, str]]:
    """Load the files' host keys into ``into``; return their ``@revoked`` keys as (type, base64).
    OpenSSH refuses a revoked key whatever else the files say, and so does the SSH transport."""
    revoked: set[tuple[str, str]] = set()
    for f in files:
        entries, rev = _read_known_hosts(f)
        revoked |= rev
        # as HostKeys.load() keeps them (add() would scan every entry for each one)
        into._entries.extend(entries)  # type: ignore[attr-defined]  # noqa: SLF001 - paramiko.HostKeys offers no bulk add (see above)
    return revoked
