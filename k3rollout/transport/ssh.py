"""The SSH transport: paramiko, one reused connection per host, strict host keys on every hop.

How a host is reached (address, port, user, keys, ssh-agent, ProxyJump chains, ProxyCommand,
known_hosts) is resolved by ``sshconf`` from Ansible's connection variables, ``ansible.cfg``
and ``~/.ssh/config``, exactly as the Ansible path gets it. An unknown or changed host key, of
the target or of a jump host, is an error, never accepted; a setting that would lower that
is refused before any node is touched. paramiko's exceptions are translated here, once,
into the project's transport errors with host, command and tail.

sshd drops new connections beyond its ``MaxStartups`` (default 10:30:100) with a banner
error: such handshakes are retried with backoff, and at most ``max_handshakes``
handshakes run at once per endpoint.
"""

from __future__ import annotations

import select
import shlex
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

from k3rollout.errors import CommandTimeout, ConnectionLost, HostUnreachable, TransportError
from k3rollout.transport.base import CommandResult
from k3rollout.transport.sshconf import Hop, Resolved, Resolver, hops_of, load_known_hosts, render_openssh_config


def live_transport(client: paramiko.SSHClient) -> paramiko.Transport:
    """The client's transport; an SSHException (as for a dropped link) when it has none: a
    client whose connection is gone answers ``get_transport()`` with None."""
    transport = client.get_transport()
    if transport is None or not transport.is_active():
        raise paramiko.SSHException("the SSH connection is closed")
    return transport

class HostKeyError(TransportError):
    """Unknown or changed host key: the host is not who the inventory says it is."""


class AuthError(TransportError):
    """The host refused our credentials."""


class _Banner(Exception):
    """sshd dropped the connection before its banner (MaxStartups): worth a retry."""


@dataclass(frozen=True)
class SSHTarget:
    name: str
    resolved: Resolved

    @classmethod
    def from_vars(cls, name: str, v: dict[str, Any], resolver: Resolver | None = None) -> SSHTarget:
        return cls(name, (resolver or Resolver()).resolve(name, v))

    # the target hop's settings, by the names the rest of the project uses
    @property
    def hop(self) -> Hop:
        return self.resolved.hop

    @property
    def address(self) -> str:
        return self.hop.address

    @property
    def port(self) -> int:
        return self.hop.port

    @property
    def user(self) -> str:
        return self.hop.user

    @property
    def known_hosts(self) -> str:
        return ", ".join(self.resolved.known_hosts)

    @property
    def become(self) -> bool:
        return self.resolved.become

    @property
    def become_password(self) -> str | None:
        return self.resolved.become_password

    @property
    def connect_timeout(self) -> float:
        return self.resolved.connect_timeout

    @property
    def via(self) -> str:
        chain = hops_of(self.hop)[:-1]
        if chain:
            return " via " + " -> ".join(h.endpoint for h in chain)
        return f" via ProxyCommand {self.hop.proxy_command!r}" if self.hop.proxy_command else ""


class SSHExecutor:
    kind = "ssh"

    def __init__(self, hosts: dict[str, dict[str, Any]], *, max_handshakes: int = 8, banner_retries: int = 5,
                 openssh: str | None = None):
        """``openssh``: the ``ssh`` the Ansible path will run; when given, each host's first
        connection also has OpenSSH check the host's key, as the Ansible path will reach it
        (``openssh_agrees``), so the two transports cannot disagree after a node is drained."""
        self.openssh = openssh
        self._openssh_ok: set[str] = set()
        resolver = Resolver()
        self.targets = {n: SSHTarget.from_vars(n, v, resolver) for n, v in hosts.items()}
        self._clients: dict[str, paramiko.SSHClient] = {}
        self._hops: dict[str, list[paramiko.SSHClient]] = {}     # jump-host clients kept open per host
        self._locks = {n: threading.Lock() for n in hosts}
        self._handshakes: dict[tuple[str, int], threading.BoundedSemaphore] = {}
        self._hs_lock = threading.Lock()
        self.max_handshakes = max_handshakes
        self.banner_retries = banner_retries

    # ---------------------------------------------------------------- connections

    def _sem(self, h: Hop) -> threading.BoundedSemaphore:
        with self._hs_lock:
            return self._handshakes.setdefault((h.address, h.port), threading.BoundedSemaphore(self.max_handshakes))

    def _handshake(self, t: SSHTarget, h: Hop, sock: Any, role: str) -> paramiko.SSHClient:
        """One SSH handshake with ``h`` (over ``sock`` when given): host key checked strictly
        against the resolved known_hosts files, then authenticated as OpenSSH would."""
        client = paramiko.SSHClient()
        revoked = load_known_hosts(t.resolved.known_hosts, client.get_host_keys())
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        where = f"{h.address}:{h.port}{role}"
        try:
            with self._sem(h):
                client.connect(h.address, port=h.port, username=h.user, key_filename=list(h.key_files) or None,  # type: ignore[arg-type]  # paramiko takes a list too
                               password=t.resolved.password if h is t.hop else None, sock=sock,
                               timeout=t.connect_timeout, banner_timeout=t.connect_timeout,
                               auth_timeout=t.connect_timeout, allow_agent=h.allow_agent,
                               look_for_keys=h.look_for_keys)
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostKeyError(f"host key CHANGED for {where} (got {exc.key.get_name()} "
                               f"{exc.key.get_base64()[:24]}..., {t.known_hosts} has another): refusing to "
                               "connect; verify the host and update known_hosts", host=t.name) from None
        except paramiko.AuthenticationException as exc:
            client.close()
            raise AuthError(f"authentication failed as {h.user}@{where} ({exc})", host=t.name) from None
        except paramiko.SSHException as exc:
            client.close()
            text = str(exc)
            if "not found in known_hosts" in text:
                raise HostKeyError(f"host key of {where} is UNKNOWN (not in {t.known_hosts}): refusing to connect; "
                                   "add the verified key to known_hosts", host=t.name) from None
            if "no authentication methods available" in text.lower():
                raise AuthError(f"no key, agent or password to authenticate as {h.user}@{where}",
                                host=t.name) from None
            if "banner" in text.lower():
                raise _Banner(text) from None
            raise HostUnreachable(f"SSH handshake with {where} failed: {text}", host=t.name) from None
        except TimeoutError as exc:
            client.close()
            raise HostUnreachable(f"connect to {where} timed out ({exc})", host=t.name) from None
        except (paramiko.ssh_exception.NoValidConnectionsError, OSError, EOFError) as exc:
            client.close()
            raise HostUnreachable(f"cannot connect to {where}: {exc}", host=t.name) from None
        transport = client.get_transport()
        if transport is not None:
            key = transport.get_remote_server_key()
            if (key.get_name(), key.get_base64()) in revoked:
                client.close()
                raise HostKeyError(f"host key of {where} is REVOKED (@revoked in {t.known_hosts}): refusing to "
                                   "connect", host=t.name)
            transport.set_keepalive(15)
        return client

    def _chain(self, t: SSHTarget) -> tuple[paramiko.SSHClient, list[paramiko.SSHClient]]:
        """Connect through every jump host (each one's key checked) or the ProxyCommand, then
        to the target. Returns the target's client and the jump hosts' clients."""
        chain = hops_of(t.hop)
        opened: list[paramiko.SSHClient] = []
        sock: Any = None
        try:
            for i, h in enumerate(chain):
                last = i == len(chain) - 1
                if i == 0 and h.proxy_command:
                    try:
                        # as ssh(1) runs it: through the shell
                        sock = paramiko.ProxyCommand("/bin/sh -c " + shlex.quote("exec " + h.proxy_command))
                    except (paramiko.SSHException, OSError) as exc:
                        raise HostUnreachable(f"ProxyCommand {h.proxy_command!r} failed: {exc}", host=t.name) from None
                role = "" if last else f" (jump host on the way to {t.name})"
                client = self._handshake(t, h, sock, role)
                opened.append(client)
                if not last:
                    nxt = chain[i + 1]
                    try:
                        sock = live_transport(client).open_channel("direct-tcpip", (nxt.address, nxt.port),
                                                                   ("127.0.0.1", 0), timeout=t.connect_timeout)
                    except (paramiko.SSHException, EOFError, OSError) as exc:
                        raise HostUnreachable(f"jump host {h.endpoint} cannot reach {nxt.address}:{nxt.port} "
                                              f"({exc or type(exc).__name__})", host=t.name) from None
        except BaseException:
            for c in reversed(opened):
                c.close()
            if sock is not None and hasattr(sock, "close"):
                sock.close()
            raise
        return opened[-1], opened[:-1]

    def _connect(self, t: SSHTarget) -> tuple[paramiko.SSHClient, list[paramiko.SSHClient]]:
        # sshd MaxStartups drops new connections with a banner error: back off and retry
        delay = 0.05
        for attempt in range(self.banner_retries + 1):
            try:
                return self._chain(t)
            except _Banner as exc:
                if attempt >= self.banner_retries:
                    raise HostUnreachable(f"SSH handshake failed{t.via}: {exc}", host=t.name) from None
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
        raise HostUnreachable("SSH handshake kept failing", host=t.name)

    def _client(self, host: str) -> paramiko.SSHClient:
        c = self._clients.get(host)
        transport = c.get_transport() if c else None
        if c is None or transport is None or not transport.is_active():
            self._drop(host)
            c, hops = self._connect(self.targets[host])
            self._clients[host], self._hops[host] = c, hops
            if self.openssh and host not in self._openssh_ok:
                try:
                    self.openssh_agrees(self.targets[host])
                except TransportError:
                    self._drop(host)
                    raise
                self._openssh_ok.add(host)
        return c

    def openssh_agrees(self, t: SSHTarget) -> None:
        """Have OpenSSH, with the ssh_config the Ansible path will use, check ``t``'s host key
        through the same hops, without logging in (authentication ``none`` only, so nothing
        runs on the host). It must find the key known and matching, as paramiko did; anything
        else refuses the host now, while nothing has changed on it."""
        text, alias = render_openssh_config(t.resolved)
        lookup = t.address if t.port == 22 else f"[{t.address}]:{t.port}"
        with tempfile.TemporaryDirectory(prefix="k3ssh-") as d:
            cfg = Path(d) / "ssh_config"
            cfg.write_text(text)
            try:
                p = subprocess.run([str(self.openssh), "-v", "-F", str(cfg), "-o", "PreferredAuthentications=none",
                                    "-o", "ControlMaster=no", "-o", "ControlPath=none", "-T", alias, "true"],
                                   stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                                   timeout=max(15.0, 3 * t.connect_timeout))
            except subprocess.TimeoutExpired:
                raise HostUnreachable(f"OpenSSH (the Ansible path's ssh) did not finish its host-key check of "
                                      f"{t.address}:{t.port}{t.via}", host=t.name) from None
        if f"Host '{lookup}' is known and matches" in p.stderr:
            return
        tail = "\n".join(x for x in p.stderr.splitlines() if not x.startswith("debug"))[-800:]
        if "host key" in tail.lower() or "verification failed" in tail.lower():
            raise HostKeyError(f"OpenSSH, which runs the vendor task files through Ansible, refuses the host key of "
                               f"{t.address}:{t.port}{t.via} that paramiko accepted; the host is refused before "
                               f"anything changes on it: {tail}", host=t.name)
        raise HostUnreachable(f"OpenSSH, which runs the vendor task files through Ansible, could not check the host "
                              f"key of {t.address}:{t.port}{t.via} as paramiko did: {tail}", host=t.name)

    def _drop(self, host: str) -> None:
        c = self._clients.pop(host, None)
        if c is not None:
            c.close()
        for j in reversed(self._hops.pop(host, [])):
            j.close()

    # ---------------------------------------------------------------- Executor

    def run(self, host: str, argv: list[str], *, stdin: bytes | None = None, timeout: float = 600.0) -> CommandResult:
        t = self.targets[host]
        command = shlex.join(argv)
        payload = stdin or b""
        if t.become:
            as_user = t.resolved.become_user
            sudo = "sudo" + (f" -u {shlex.quote(as_user)}" if as_user and as_user != "root" else "")
            if t.become_password:
                command = f"{sudo} -S -p '' -- " + command
                payload = t.become_password.encode() + b"\n" + payload
            else:
                command = f"{sudo} -n -- " + command
        started = time.monotonic()
        with self._locks[host]:
            client = self._client(host)
            try:
                chan = live_transport(client).open_session(timeout=t.connect_timeout)
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
                    except TimeoutError:
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
                    client, hops = self._connect(self.targets[host])
                    # a host going down may still complete a handshake: it must also run a command
                    if self._answers(client):
                        self._clients[host], self._hops[host] = client, hops
                        return time.monotonic() - started
                    client.close()
                    for j in reversed(hops):
                        j.close()
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
            chan = live_transport(client).open_session(timeout=5)
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

