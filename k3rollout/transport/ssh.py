"""The SSH transport: paramiko, one reused connection per host, strict host keys.

Connection settings come from Ansible's inventory variables: ``ansible_host``,
``ansible_port``, ``ansible_user``, ``ansible_ssh_private_key_file``, ``ansible_become``
(+ ``ansible_become_password``), ``ansible_host_key_checking`` (default true), plus
``k3_known_hosts_file`` (default ``~/.ssh/known_hosts``) and ``k3_connect_timeout``.
An unknown or changed host key is an error, never accepted. paramiko's exceptions are
translated here, once, into the project's transport errors with host, command and tail.

sshd drops new connections beyond its ``MaxStartups`` (default 10:30:100) with a banner
error: such handshakes are retried with backoff, and at most ``max_handshakes``
handshakes run at once per endpoint.
"""

from __future__ import annotations

import os
import shlex
import select
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from k3rollout.errors import CommandTimeout, ConnectionLost, HostUnreachable, InputError, TransportError
from k3rollout.transport.base import CommandResult


class HostKeyError(TransportError):
    """Unknown or changed host key: the host is not who the inventory says it is."""


class AuthError(TransportError):
    """The host refused our credentials."""


@dataclass(frozen=True)
class SSHTarget:
    name: str
    address: str
    port: int
    user: str
    key_file: str | None
    known_hosts: str
    strict: bool
    become: bool
    become_password: str | None
    connect_timeout: float

    @classmethod
    def from_vars(cls, name: str, v: dict[str, Any]) -> "SSHTarget":
        strict = v.get("ansible_host_key_checking", True)
        if isinstance(strict, str):
            strict = strict.lower() not in ("false", "no", "0", "off")
        key = v.get("ansible_ssh_private_key_file") or v.get("ansible_private_key_file")
        return cls(name=name, address=str(v.get("ansible_host", name)), port=int(v.get("ansible_port", 22)),
                   user=str(v.get("ansible_user", os.environ.get("USER", "root"))),
                   key_file=os.path.expanduser(str(key)) if key else None,
                   known_hosts=os.path.expanduser(str(v.get("k3_known_hosts_file", "~/.ssh/known_hosts"))),
                   strict=bool(strict), become=bool(v.get("ansible_become", False)),
                   become_password=(str(v["ansible_become_password"]) if v.get("ansible_become_password")
                                    else None),
                   connect_timeout=float(v.get("k3_connect_timeout", 10)))


class SSHExecutor:
    kind = "ssh"

    def __init__(self, hosts: dict[str, dict[str, Any]], *, max_handshakes: int = 8, banner_retries: int = 5):
        self.targets = {n: SSHTarget.from_vars(n, v) for n, v in hosts.items()}
        self._clients: dict[str, paramiko.SSHClient] = {}
        self._locks = {n: threading.Lock() for n in hosts}
        self._handshakes: dict[tuple[str, int], threading.BoundedSemaphore] = {}
        self._hs_lock = threading.Lock()
        self.max_handshakes = max_handshakes
        self.banner_retries = banner_retries
        for t in self.targets.values():
            if t.strict and not Path(t.known_hosts).is_file():
                raise InputError(f"host {t.name}: known_hosts file {t.known_hosts} does not exist; strict host key "
                                 "checking needs it (set k3_known_hosts_file)")
            if t.key_file and not Path(t.key_file).is_file():
                raise InputError(f"host {t.name}: ansible_ssh_private_key_file {t.key_file} does not exist")

    # ---------------------------------------------------------------- connections

    def _sem(self, t: SSHTarget) -> threading.BoundedSemaphore:
        with self._hs_lock:
            return self._handshakes.setdefault((t.address, t.port), threading.BoundedSemaphore(self.max_handshakes))

    def _connect(self, t: SSHTarget) -> paramiko.SSHClient:
        delay = 0.05
        for attempt in range(self.banner_retries + 1):
            client = paramiko.SSHClient()
            if t.strict:
                client.load_host_keys(t.known_hosts)
                client.set_missing_host_key_policy(paramiko.RejectPolicy())
            else:
                client.set_missing_host_key_policy(paramiko.WarningPolicy())
            try:
                with self._sem(t):
                    client.connect(t.address, port=t.port, username=t.user, key_filename=t.key_file,
                                   timeout=t.connect_timeout, banner_timeout=t.connect_timeout,
                                   auth_timeout=t.connect_timeout, allow_agent=False, look_for_keys=False)
                transport = client.get_transport()
                if transport is not None:
                    transport.set_keepalive(15)
                return client
            except paramiko.BadHostKeyException as exc:
                client.close()
                raise HostKeyError(f"host key CHANGED for {t.address}:{t.port} (got {exc.key.get_name()} "
                                   f"{exc.key.get_base64()[:24]}..., {t.known_hosts} has another): refusing to "
                                   "connect; verify the host and update known_hosts", host=t.name) from None
            except paramiko.AuthenticationException as exc:
                client.close()
                raise AuthError(f"authentication failed as {t.user}@{t.address}:{t.port} ({exc})",
                                host=t.name) from None
            except paramiko.SSHException as exc:
                client.close()
                text = str(exc)
                if "not found in known_hosts" in text:
                    raise HostKeyError(f"host key of {t.address}:{t.port} is UNKNOWN (not in {t.known_hosts}): "
                                       "refusing to connect; add the verified key to known_hosts",
                                       host=t.name) from None
                if "banner" in text.lower() and attempt < self.banner_retries:
                    # sshd MaxStartups dropped us: back off and retry
                    time.sleep(delay)
                    delay = min(delay * 2, 2.0)
                    continue
                raise HostUnreachable(f"SSH handshake failed: {text}", host=t.name) from None
            except (socket.timeout, TimeoutError) as exc:
                client.close()
                raise HostUnreachable(f"connect to {t.address}:{t.port} timed out ({exc})", host=t.name) from None
            except (paramiko.ssh_exception.NoValidConnectionsError, OSError, EOFError) as exc:
                client.close()
                raise HostUnreachable(f"cannot connect to {t.address}:{t.port}: {exc}", host=t.name) from None
        raise HostUnreachable("SSH handshake kept failing", host=t.name)

    def _client(self, host: str) -> paramiko.SSHClient:
        c = self._clients.get(host)
        transport = c.get_transport() if c else None
        if c is None or transport is None or not transport.is_active():
            if c is not None:
                c.close()
            c = self._connect(self.targets[host])
            self._clients[host] = c
        return c

    def _drop(self, host: str) -> None:
        c = self._clients.pop(host, None)
        if c is not None:
            c.close()

    # ---------------------------------------------------------------- Executor

    def run(self, host: str, argv: list[str], *, stdin: bytes | None = None, timeout: float = 600.0) -> CommandResult:
        t = self.targets[host]
        command = shlex.join(argv)
        payload = stdin or b""
        if t.become:
            if t.become_password:
                command = "sudo -S -p '' -- " + command
                payload = t.become_password.encode() + b"\n" + payload
            else:
                command = "sudo -n -- " + command
        started = time.monotonic()
        with self._locks[host]:
            client = self._client(host)
            try:
                chan = client.get_transport().open_session(timeout=t.connect_timeout)
                chan.settimeout(1.0)
                chan.exec_command(command)
                if payload:
                    chan.sendall(payload)
                chan.shutdown_write()
                out, err = bytearray(), bytearray()
                deadline = started + timeout
                while True:
                    # sleep in select() until stdout or stderr has data or the channel closes
                    # (paramiko's channel fileno): no polling, so many threads cost no CPU
                    select.select([chan], [], [], max(0.0, min(1.0, deadline - time.monotonic())))
                    got = False
                    try:
                        while chan.recv_ready():
                            out += chan.recv(65536)
                            got = True
                        while chan.recv_stderr_ready():
                            err += chan.recv_stderr(65536)
                            got = True
                    except socket.timeout:
                        pass
                    if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                        break
                    if chan.closed and not got and not chan.exit_status_ready():
                        break
                    if not chan.get_transport().is_active():
                        break
                    if time.monotonic() > deadline:
                        chan.close()
                        self._drop(host)
                        raise CommandTimeout(f"command ran past its {timeout:.0f}s timeout", host=host,
                                             command=shlex.join(argv), output_tail=(out + err).decode(errors="replace"))
                    if chan.eof_received and not got and not chan.exit_status_ready():
                        # output is complete; the exit status is on its way
                        chan.status_event.wait(0.05)
                if not chan.exit_status_ready():
                    self._drop(host)
                    raise ConnectionLost("connection lost while the command ran; its outcome on the host is unknown",
                                         host=host, command=shlex.join(argv),
                                         output_tail=(out + err).decode(errors="replace"))
                rc = chan.recv_exit_status()
                chan.close()
                if rc == -1:
                    # the session ended without an exit status (killed, or the host went down)
                    self._drop(host)
                    raise ConnectionLost("the session ended without an exit status; the command's outcome on the "
                                         "host is unknown", host=host, command=shlex.join(argv),
                                         output_tail=(out + err).decode(errors="replace"))
            except (paramiko.SSHException, EOFError, OSError) as exc:
                self._drop(host)
                raise ConnectionLost(f"connection lost ({exc}); the command's outcome on the host is unknown",
                                     host=host, command=shlex.join(argv)) from None
        return CommandResult(host, tuple(argv), rc, out.decode(errors="replace"), err.decode(errors="replace"),
                             time.monotonic() - started)

    def wait_for_host(self, host: str, timeout: float) -> float:
        started = time.monotonic()
        delay = 0.1
        with self._locks[host]:
            self._drop(host)
            while True:
                try:
                    client = self._connect(self.targets[host])
                    # a host going down may still complete a handshake: it must also run a command
                    if self._answers(client):
                        self._clients[host] = client
                        return time.monotonic() - started
                    client.close()
                    if time.monotonic() - started >= timeout:
                        raise HostUnreachable(f"did not come back within {timeout:.0f}s after reboot", host=host)
                except (HostKeyError, AuthError):
                    raise
                except HostUnreachable as exc:
                    if time.monotonic() - started >= timeout:
                        raise HostUnreachable(f"did not come back within {timeout:.0f}s after reboot", host=host,
                                              output_tail=str(exc)) from None
                time.sleep(min(delay, max(0.0, timeout - (time.monotonic() - started))))
                delay = min(delay * 2, 5.0)

    @staticmethod
    def _answers(client: paramiko.SSHClient) -> bool:
        try:
            chan = client.get_transport().open_session(timeout=5)
            chan.settimeout(10)
            chan.exec_command("true")
            return chan.recv_exit_status() == 0
        except (paramiko.SSHException, EOFError, OSError):
            return False

    def api_host(self, host: str) -> str:
        """The address of the node's HTTP services: the address SSH reaches it on."""
        return self.targets[host].address

    def close(self) -> None:
        for h in list(self._clients):
            self._drop(h)

