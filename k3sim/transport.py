"""The transport to simulated hosts: argv to the simulated cluster's daemon, one line each way.

k3rollout builds it through the simulator's registered transport (``k3sim.plugin``), for
hosts with ``ansible_connection: k3sim``.

The simulated hosts' commands run in the sim root's daemon (``k3sim.netd``, which
also serves their vLLM ports), not in the engine: a real host runs a command on its own
CPU while the controller waits, and at a thousand nodes playing the hosts in the
engine's interpreter took a quarter of its one CPU. A command takes an idle connection
to the daemon's command socket (a unix socket in the abstract namespace; a new one when
none is idle, so there are as many as commands ran at once) and sends ``{"host", "argv",
"stdin"}`` as one JSON line; the daemon runs the simulator's
``dispatch`` in that connection's thread and answers with the result as one JSON line.

It behaves like the SSH transport at the edges that matter to the engine: a host that is
down raises ``HostUnreachable``, a dropped session raises ``ConnectionLost`` (after the
command may have run on the host; so does a daemon that dies mid-command), no answer in
time raises ``CommandTimeout``, and waiting for a reboot polls until the host answers.
"""

from __future__ import annotations

import atexit
import base64
import os
import shlex
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

from k3rollout import fastjson
from k3rollout.errors import CommandTimeout, ConnectionLost, HostUnreachable
from k3rollout.transport import local
from k3rollout.transport.base import CommandResult
from k3sim import netd, sched, slurmjobs
from k3sim import state as st
from k3sim.dispatch import Result, id_command, init_cluster

# The clusters whose executors this process closed, with their daemons still up. Closing an
# executor does not stop the daemon at once: the next executor on the same cluster in this process
# takes it over (``run``'s after its preflight's, each pass of ``observe``), as a real cluster
# outlives the connections to it, where stopping it cost a new daemon's start-up and every host's
# servers brought up again. Those still let go of when the process ends are stopped then, so a
# command leaves no daemon behind; a killed one leaves its daemon, as it always did. The daemon
# reads the environment it starts with (the simulated clock's ``K3SIM_CLOCK_OFFSET``...): one
# let go of under another environment than this process's now is stopped, not taken over.
_LET_GO: dict[Path, dict[str, str]] = {}
_LET_GO_LOCK = threading.Lock()


def stop_let_go() -> list[Path]:
    """Stop the daemon of every cluster this process let go of and no executor took over
    (at the process's exit); returns their roots."""
    with _LET_GO_LOCK:
        roots = sorted(_LET_GO)
        _LET_GO.clear()
    for root in roots:
        netd.shutdown(root)
    return roots


def forget_let_go() -> None:
    """Leave the daemons let go of running, as a process killed now would (tests that stop
    the CLI in their own process as a kill would)."""
    with _LET_GO_LOCK:
        _LET_GO.clear()


atexit.register(stop_let_go)


class SimExecutor:
    kind = "k3sim"
    answer_margin_s = 30.0      # past a command's timeout (the simulator has no timeouts of its own)

    def __init__(self, root: Path, hosts: dict[str, dict[str, Any]], poll_s: float = 0.02,
                 observation_pass: int | None = None):
        self.root = Path(root)
        self.dirs = init_cluster(self.root, hosts)
        if observation_pass is not None:
            # the simulated hosts learn which ``k3rollout observe`` pass looks at them (a late
            # fault may start at a pass); a real host is told nothing
            for d in self.dirs.values():
                st.begin_observation(d, observation_pass)
        self.poll_s = poll_s
        self._addresses: dict[str, str] = {}
        # connections to the daemon: each command takes an idle one (or opens one) and gives
        # it back after its answer, so there are as many as commands ever ran at once, not
        # one per engine thread that ever ran (threads come and go: a node's worker, a
        # window slot; each used to leave its connection, and a daemon thread, behind)
        self._idle: list[list] = []
        self._links: set[socket.socket] = set()
        self._links_lock = threading.Lock()
        with _LET_GO_LOCK:
            # taken over: this executor stops it or lets it go
            env = _LET_GO.pop(self.root.absolute(), None)
        if env is not None and env != os.environ:
            netd.stop(self.root)            # started under another environment; ensure() starts anew
        netd.ensure(self.root)      # the simulated cluster: the hosts' commands and their vLLM sockets
        # the cluster's simulated Kubernetes API server, which the daemon also serves
        self.kubeconfig = netd.kubeconfig_path(self.root)

    def state_dir(self, host: str) -> Path:
        return self.dirs[host]

    # ---------------------------------------------------------------- the daemon link

    def _take(self, fresh: bool = False) -> list:
        """A connection to the daemon for one command: [socket, the timeout set on it]. An
        idle one unless ``fresh``."""
        if not fresh:
            with self._links_lock:
                if self._idle:
                    return self._idle.pop()
        for attempt in (1, 2):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(netd.command_name(self.root))
                break
            except OSError:
                sock.close()
                if attempt == 2:
                    raise
                netd.ensure(self.root)
        with self._links_lock:
            self._links.add(sock)
        return [sock, None]

    def _give(self, link: list) -> None:
        with self._links_lock:
            if link[0] in self._links:        # not closed by close() meanwhile
                self._idle.append(link)

    def _drop(self, link: list, idle_too: bool = False) -> None:
        """Close a connection whose state is unknown; with ``idle_too``, every idle one as
        well (the daemon they lead to is gone)."""
        with self._links_lock:
            gone = [link] + (self._idle if idle_too else [])
            if idle_too:
                self._idle = []
            for x in gone:
                if x[0] in self._links:
                    self._links.discard(x[0])
        for x in gone:
            x[0].close()

    @staticmethod
    def _set_timeout(link: list, timeout: float) -> None:
        """The command's deadline as the kernel's socket timeouts: the socket stays blocking,
        so a send and a receive are one system call each (a Python socket timeout polls
        before every call)."""
        if link[1] != timeout:
            # 0 would mean "wait for ever" to the kernel; a month is as good as for ever
            t = min(max(timeout, 0.001), 30 * 86400.0)
            tv = struct.pack("ll", int(t), int((t % 1) * 1_000_000))
            link[0].setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
            link[0].setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
            link[1] = timeout

    def _dispatch(self, host: str, argv: list[str], stdin: bytes | None, timeout: float) -> Result:
        line = fastjson.dumps_line({"host": self.dirs[host].name, "argv": list(argv),
                                    "stdin": None if stdin is None else base64.b64encode(stdin).decode()})
        for attempt in (1, 2):
            link = self._take(fresh=attempt == 2)
            sock = link[0]
            try:
                self._set_timeout(link, timeout + self.answer_margin_s)
                sock.sendall(line)
                break
            except (BrokenPipeError, ConnectionResetError, ConnectionRefusedError) as exc:
                # a unix socket refuses a send at once when its peer is gone: the daemon (or this
                # connection's end of it) went away before the request, which it never received
                self._drop(link, idle_too=True)
                if attempt == 2:
                    raise ConnectionLost(f"the simulated cluster is gone ({exc}); the command did not run",
                                         host=host, command=shlex.join(argv)) from None
            except OSError as exc:
                self._drop(link)
                raise ConnectionLost(f"lost the simulated host while sending the command ({exc}); its outcome "
                                     "is unknown", host=host, command=shlex.join(argv)) from None
        answer = bytearray()
        try:
            while not answer.endswith(b"\n"):     # one request, one answer line
                chunk = sock.recv(1 << 16)
                if not chunk:
                    self._drop(link)
                    raise ConnectionLost("the simulated cluster closed the connection while the command ran; its "
                                         "outcome is unknown", host=host, command=shlex.join(argv))
                answer += chunk
        except BlockingIOError:                     # SO_RCVTIMEO ran out
            self._drop(link)
            raise CommandTimeout(f"no answer within {timeout:.0f}s", host=host, command=shlex.join(argv)) from None
        except OSError as exc:
            self._drop(link)
            raise ConnectionLost(f"lost the simulated host while the command ran ({exc}); its outcome is unknown",
                                 host=host, command=shlex.join(argv)) from None
        self._give(link)
        out = fastjson.loads(answer)
        if "error" in out:
            raise RuntimeError(f"simulator failure on {host} running {shlex.join(argv)!r}:\n{out['error']}")
        return Result(int(out["rc"]), out["stdout"], out["stderr"], bool(out["unreachable"]), bool(out["dropped"]))

    # ---------------------------------------------------------------- the executor interface

    def run(self, host: str, argv: list[str], *, stdin: bytes | None = None, timeout: float = 600.0) -> CommandResult:
        started = time.monotonic()
        res = self._dispatch(host, list(argv), stdin, timeout)
        took = time.monotonic() - started
        if res.unreachable:
            raise HostUnreachable("host does not answer", host=host, command=shlex.join(argv),
                                  output_tail=res.stderr)
        if res.dropped:
            raise ConnectionLost("connection lost while the command ran; its outcome on the host is unknown",
                                 host=host, command=shlex.join(argv), output_tail=res.stdout[-300:] + res.stderr)
        return CommandResult(host, tuple(argv), res.rc, res.stdout, res.stderr, took)

    def run_controller(self, argv: list[str], *, stdin: bytes | None = None,
                       timeout: float = 600.0) -> CommandResult:
        """A command on the simulated cluster's controller (the machine an operator runs
        ``scontrol`` on): it answers for every simulated node, as slurmctld does, and
        touches no node's command log. Unknown programs are not found, as on a controller
        without them."""
        if os.environ.get("SLURM_CONF"):
            # the controller names a real Slurm cluster: its slurmctld answers, not the sim's
            return local.run(argv, stdin=stdin, timeout=timeout)
        started = time.monotonic()
        kinds = {str(st.load(d)["scheduler"]["kind"]) for d in self.dirs.values()}
        if argv and argv[0] == "scontrol":
            controller = {"name": "", "scheduler": {"kind": "slurm" if "slurm" in kinds else "none"}}
            rc, out, err = sched.scontrol(controller, list(argv[1:]), self.root / "_controller")
        elif argv and argv[0] in slurmjobs.COMMANDS and "slurm" in kinds:
            def on_node(host: str, cmd: list[str]) -> tuple[int, str, str]:
                res = self._dispatch(host, cmd, None, timeout)
                return res.rc, res.stdout, res.stderr

            rc, out, err = slurmjobs.COMMANDS[argv[0]](self.root, list(argv[1:]), on_node)
        elif argv[:1] == ["id"]:
            rc, out, err = id_command(list(argv[1:]))      # the operator simulating the cluster
        else:
            rc, out, err = 127, "", f"{argv[0] if argv else ''}: command not found on the controller\n"
        return CommandResult("controller", tuple(argv), rc, out, err, time.monotonic() - started)

    def wait_for_host(self, host: str, timeout: float) -> float:
        started = time.monotonic()
        while True:
            res = self._dispatch(host, ["true"], None, 60.0)
            if not res.unreachable:
                return time.monotonic() - started
            if time.monotonic() - started >= timeout:
                raise HostUnreachable(f"did not come back within {timeout:.0f}s after reboot", host=host,
                                      output_tail=res.stderr)
            time.sleep(self.poll_s)

    def api_host(self, host: str) -> str:
        """The address the host's HTTP services answer on (its simulated IP, fixed when the
        host was created)."""
        addr = self._addresses.get(host)
        if addr is None:
            addr = self._addresses[host] = str(st.load(self.dirs[host])["address"])
        return addr

    def close(self) -> None:
        with self._links_lock:
            links, self._links, self._idle = self._links, set(), []
        for sock in links:
            sock.close()
        with _LET_GO_LOCK:
            _LET_GO[self.root.absolute()] = dict(os.environ)
