"""Inventories resolved by Ansible itself: ``ansible-inventory --list`` as a subprocess.

This is how AWX reads inventories, and it is the reference for everything k3rollout
cannot prove it resolves identically on its own: INI files, directories of mixed sources,
several ``-i``, inventory plugins (``constructed`` ...), executable scripts, vault-encrypted
files and values, ``group_vars/`` and ``host_vars/`` beside the playbook. ``--list``
(without ``--export``) gives each host's merged variables, in Ansible's precedence.

Ansible is told to fail on any source it cannot parse (by default it warns and goes on
with an empty inventory, which would silently drop hosts). Its error output names the file
(and the line, where the plugin gives one); it is passed through, exit 2.

Vault: ``ansible-inventory --list`` prints an inline ``!vault`` value still encrypted, as
``{"__ansible_vault": CIPHERTEXT}``; it is decrypted here with Ansible's own vault library
and the password the user gave (``--vault-password-file`` / ``--ask-vault-pass``).
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from k3rollout.errors import InputError
from k3rollout.toolpaths import find_tool

if TYPE_CHECKING:
    from ansible.parsing.vault import VaultLib

# an inventory that takes longer than this, or more memory, is refused rather than waited for
TIMEOUT_S = 120.0
MEMORY_LIMIT = 4 << 30


@dataclass
class VaultOptions:
    """How to open vaulted inventory content: password files (files or executables, as
    Ansible treats them) and/or a password typed once (``--ask-vault-pass``)."""

    password_files: list[str] = field(default_factory=list)
    password: str | None = None

    def __bool__(self) -> bool:
        return bool(self.password_files) or self.password is not None


def _tool() -> str:
    exe = find_tool("ansible-inventory")
    if exe is None:
        raise InputError("this inventory needs ansible-inventory (from ansible-core), which is neither beside "
                         "the Python running k3rollout nor on PATH: pip install ansible-core")
    return exe


def _limit_resources() -> None:      # runs in the child, before exec
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ValueError, OSError):
        pass


_ORIGIN = re.compile(r"^Origin: (?!<)(.+?)(?::(\d+)(?::\d+)?)?$", re.M)


def _failure(stderr: str, sources: list[str]) -> InputError:
    """Ansible's error output, without its colour, blank lines and repeated causes, naming
    the file (and line) it names."""
    lines: list[str] = []
    for raw in stderr.splitlines():
        line = raw.strip()
        if not line or line == "<<< caused by >>>" or line.startswith("(source not shown") or line in lines:
            continue
        lines.append(line)
    m = None
    for m in _ORIGIN.finditer(stderr):
        if m.group(2):
            break
    text = "\n  ".join(lines[-12:]) or "ansible-inventory failed without a message"
    if m:
        return InputError(f"ansible-inventory cannot resolve this inventory:\n  {text}", path=m.group(1),
                          line=int(m.group(2)) if m.group(2) else None)
    return InputError(f"ansible-inventory cannot resolve this inventory:\n  {text}", path=", ".join(sources))


def run(sources: list[str], *, action: list[str] | None = None, playbook_dir: str | None = None,
        vault: VaultOptions | None = None, limit: str | None = None) -> str:
    """stdout of ``ansible-inventory -i S... ACTION`` (default ``--list``); InputError on failure."""
    argv = [_tool()]
    for s in sources:
        argv += ["-i", s]
    argv += action or ["--list"]
    if playbook_dir:
        argv += ["--playbook-dir", playbook_dir]
    if limit:
        argv += ["--limit", limit]
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True", "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True",
           "ANSIBLE_DEPRECATION_WARNINGS": "False", "ANSIBLE_LOCALHOST_WARNING": "False"}
    pass_fds: tuple[int, ...] = ()
    read_fd = None
    if vault:
        for f in vault.password_files:
            argv += ["--vault-password-file", f]
        if vault.password is not None:
            # the typed password reaches Ansible through a pipe, never a file on disk
            read_fd, write_fd = os.pipe()
            os.write(write_fd, vault.password.encode() + b"\n")
            os.close(write_fd)
            pass_fds = (read_fd,)
            argv += ["--vault-password-file", f"/dev/fd/{read_fd}"]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT_S, pass_fds=pass_fds,
                           stdin=subprocess.DEVNULL, preexec_fn=_limit_resources, check=False)
    except subprocess.TimeoutExpired:
        raise InputError(f"ansible-inventory took more than {TIMEOUT_S:g} s to resolve this inventory; refused",
                         path=", ".join(sources)) from None
    finally:
        if read_fd is not None:
            os.close(read_fd)
    if p.returncode != 0:
        if "MemoryError" in p.stderr:
            raise InputError(f"resolving this inventory needs more than {MEMORY_LIMIT >> 30} GiB of memory "
                             "(a YAML alias bomb?); refused", path=", ".join(sources))
        raise _failure(p.stderr, sources)
    return p.stdout


def resolve(sources: list[str], *, playbook_dir: str | None = None,
            vault: VaultOptions | None = None) -> dict[str, Any]:
    """The JSON of ``ansible-inventory --list`` for these sources."""
    out = run(sources, playbook_dir=playbook_dir, vault=vault)
    try:
        data = json.loads(out)
    except ValueError as exc:
        raise InputError(f"ansible-inventory printed something that is not JSON ({exc})",
                         path=", ".join(sources)) from None
    if not isinstance(data, dict):
        raise InputError("ansible-inventory printed JSON that is not an inventory", path=", ".join(sources))
    return data


class Decryptor:
    """Opens ``{"__ansible_vault": ...}`` values with Ansible's vault library."""

    def __init__(self, vault: VaultOptions | None):
        self.vault = vault
        self._lib: VaultLib | None = None
        self.opened: set[str] = set()

    def _vaultlib(self, vault: VaultOptions) -> VaultLib:
        if self._lib is None:
            # lazy: ansible-core takes most of a second to import, and only a vaulted
            # inventory needs it here
            from ansible.parsing.dataloader import DataLoader
            from ansible.parsing.vault import VaultLib, VaultSecret, get_file_vault_secret

            secrets = []
            loader = DataLoader()
            for f in vault.password_files:
                s = get_file_vault_secret(filename=f, loader=loader)
                s.load()
                secrets.append(("default", s))
            if vault.password is not None:
                secrets.append(("default", VaultSecret(vault.password.encode())))
            self._lib = VaultLib(secrets)
        return self._lib

    def open(self, value: Any, where: str) -> Any:
        if isinstance(value, dict):
            if set(value) == {"__ansible_vault"}:
                if not self.vault:
                    raise InputError(f"{where} is vault-encrypted: give --vault-password-file or --ask-vault-pass")
                try:
                    plain = self._vaultlib(self.vault).decrypt(value["__ansible_vault"]).decode("utf-8")
                except Exception as exc:  # noqa: BLE001 - any vault failure is bad input
                    raise InputError(f"{where}: cannot decrypt the vaulted value ({exc})") from None
                self.opened.add(plain)
                return plain
            if set(value) == {"__ansible_unsafe"}:
                return value["__ansible_unsafe"]
            return {k: self.open(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [self.open(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value


def group_tree(data: dict[str, Any]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(group -> its hosts, group -> its children) from ``--list`` JSON, every group named
    anywhere included (Ansible leaves empty groups out of the top level)."""
    hosts: dict[str, list[str]] = {"all": [], "ungrouped": []}
    children: dict[str, list[str]] = {"all": [], "ungrouped": []}
    for name, body in data.items():
        if name == "_meta":
            continue
        if not isinstance(body, dict):
            raise InputError(f"ansible-inventory JSON: group {name!r} is not a mapping")
        hosts[name] = list(body.get("hosts", []))
        children[name] = list(body.get("children", []))
    for name in list(children):
        for c in children[name]:
            hosts.setdefault(c, [])
            children.setdefault(c, [])
    return hosts, children
