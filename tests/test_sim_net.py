"""The simulated cluster's loopback addresses: each sim root claims its own block, so two
clusters alive at once never share an address (one's client would reach the other's server)."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

from k3sim import netd


def test_roots_get_disjoint_blocks_even_when_their_hashes_meet(tmp_path, monkeypatch):
    monkeypatch.setattr(netd, "CLAIMS", tmp_path / "claims")
    monkeypatch.setattr(netd, "NETS", 2 * netd.BLOCK)          # two blocks: any two roots' hashes meet
    r1, r2, r3 = (tmp_path / f"root{i}" for i in (1, 2, 3))
    a1, a2 = netd.address_of(r1, 0), netd.address_of(r2, 0)
    assert a1 != a2
    assert {netd._prefix(r1), netd._prefix(r2)} == {0, netd.BLOCK}
    assert netd.address_of(r1, 0) == a1 and netd.kube_address(r1) != netd.kube_address(r2)
    # every host address of one root differs from every one of the other (2,032 hosts a block)
    hosts1 = {netd.address_of(r1, i) for i in range(0, 2032, 97)}
    hosts2 = {netd.address_of(r2, i) for i in range(0, 2032, 97)}
    assert not hosts1 & hosts2
    # a root that is gone frees its block for the next one
    shutil.rmtree(r1)
    assert netd.address_of(r3, 0) == a1
    # with both blocks held and no daemon serving either, the next root still gets one
    # (an old run directory's block is reused only when nothing is free)
    r4 = tmp_path / "root4"
    assert netd._prefix(r4) in (0, netd.BLOCK)


def test_concurrent_claims_never_hand_out_one_block_twice(tmp_path, monkeypatch):
    monkeypatch.setattr(netd, "CLAIMS", tmp_path / "claims")
    monkeypatch.setattr(netd, "NETS", 64 * netd.BLOCK)
    roots = [tmp_path / f"r{i}" for i in range(48)]
    with ThreadPoolExecutor(max_workers=16) as ex:
        prefixes = list(ex.map(netd._prefix, roots))
    assert len(set(prefixes)) == len(roots)
    assert prefixes == [netd._prefix(r) for r in roots]          # kept in each root: stable


def test_a_daemon_that_cannot_bind_yet_is_started_again(tmp_path):
    # what a daemon told to shut down a moment ago does: it still holds the root's sockets
    # for a moment while a new one starts (the preflight's executor closes before the run's
    # starts). The new one exits on "Address already in use";
    # ensure starts another once the address is free instead of waiting for a dead process.
    import socket
    import threading
    import time

    root = tmp_path / "sim-hosts"
    root.mkdir()
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    held.bind(netd.command_name(root))         # the old daemon's command socket, not yet closed
    held.listen(1)

    def release() -> None:
        # once the first daemon has given up (or after 20 s, and the assertion below fails)
        log = root / "netd.log"
        for _ in range(400):
            if log.is_file() and "Address already in use" in log.read_text():
                break
            time.sleep(0.05)
        held.close()

    threading.Thread(target=release, daemon=True).start()
    try:
        netd.ensure(root)
        assert netd.running(root)
        assert "Address already in use" in (root / "netd.log").read_text()
    finally:
        held.close()
        netd.shutdown(root)


def test_a_client_of_the_api_server_keeps_the_daemon_up_and_it_leaves_once_idle(tmp_path, monkeypatch):
    # a run that only polls the API server (waiting for an owner's pods) is the daemon's client
    # as much as a host's command is: the API server must not vanish under it at the idle limit
    import os
    import time
    import urllib.request

    import yaml

    monkeypatch.setenv("K3SIM_NETD_IDLE_S", "4")
    root = tmp_path / "sim-hosts"
    root.mkdir()
    netd.ensure(root)
    pid = int((root / "netd.pid").read_text())
    server = yaml.safe_load((root / "kubeconfig").read_text())["clusters"][0]["cluster"]["server"]

    def alive() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return (root / "netd.pid").is_file()

    try:
        polls = 0
        start = time.monotonic()
        # 2.5 times the idle limit and a dozen polls at least, however slow the machine makes
        # them (no command sent): how many fit in the time is the machine's, not the daemon's
        while polls < 12 or time.monotonic() - start < 10:
            with urllib.request.urlopen(f"{server}/version", timeout=10) as r:
                assert r.status == 200
            polls += 1
            time.sleep(0.3)
        assert alive(), "the daemon left while the API server had a client"
        # left alone, it goes (waited for by state, not by a clock: at most a minute)
        for _ in range(600):
            if not alive():
                break
            time.sleep(0.1)
        assert not alive(), "the daemon stayed up with no client at all"
    finally:
        netd.shutdown(root)


def test_servers_the_docker_daemon_restarts_at_boot_listen_again_with_no_command_after(tmp_path):
    # Two Docker hosts serve one 2-node replica (head and headless worker, --restart always)
    # beside their own one-node servers. Both reboot; their Docker daemons restart every
    # container at boot. Nothing is sent to the hosts afterwards: the one-node servers and the
    # replica's head (whose worker's host came up after it) must answer on their real sockets.
    import time
    import urllib.request

    from k3sim import state as st
    from k3sim.transport import SimExecutor

    hv = {"scheduler": "none", "sim_reboot_s": 0.5}
    ex = SimExecutor(tmp_path / "sim-hosts", {"n1": dict(hv), "n2": dict(hv)})
    try:
        head = st.load(ex.state_dir("n1"))["address"]
        own = {h: (st.load(ex.state_dir(h))["address"], next(iter(st.load(ex.state_dir(h))["servers"])))
               for h in ("n1", "n2")}
        replica = ["vllm/vllm-openai:v0.11.0", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "16",
                   "--nnodes", "2", "--master-addr", head, "--port", "8000"]
        assert ex.run("n2", ["docker", "run", "-d", "--name", "w", "--restart", "always", "--gpus", "all", *replica,
                             "--node-rank", "1", "--headless"]).rc == 0
        assert ex.run("n1", ["docker", "run", "-d", "--name", "h", "--restart", "always", "--gpus", "all", *replica,
                             "--node-rank", "0"]).rc == 0

        def answers(addr: str, port: str) -> bool:
            try:
                with urllib.request.urlopen(f"http://{addr}:{port}/health", timeout=5) as r:
                    return r.status == 200
            except OSError:
                return False

        urls = [(head, "8000"), *own.values()]

        def wait_all(what: str) -> None:
            # waited for by state, not by a clock: at most a minute
            for _ in range(600):
                if all(answers(a, p) for a, p in urls):
                    return
                time.sleep(0.1)
            raise AssertionError(f"{what}: not answering: {[(a, p) for a, p in urls if not answers(a, p)]}")

        ex.run("n1", ["docker", "ps"])            # the head sees its worker and loads
        wait_all("before the reboot")
        # the head's host first: when it comes up its worker's host is still down
        assert ex.run("n1", ["reboot"]).rc == 0 and ex.run("n2", ["reboot"]).rc == 0
        ex.wait_for_host("n1", 30)
        ex.wait_for_host("n2", 30)
        wait_all("after both hosts came up, with no command sent")
        assert {c["status"] for c in st.load(ex.state_dir("n1"))["docker"]["containers"].values()
                if c.get("mn")} == {"running"}
    finally:
        ex.close()


def test_a_closed_executors_daemon_is_taken_over_in_process_and_stopped_at_its_end(tmp_path, monkeypatch):
    # preflight's executor closes before run's starts: the run takes over the daemon the
    # preflight let go of (no second start-up); what is let go of at the end is stopped, as
    # the process's exit does; a daemon let go of under another environment (the simulated
    # clock moved on) is not taken over
    from k3sim import transport
    from k3sim.transport import SimExecutor

    root = tmp_path / "sim-hosts"

    def pid() -> int:
        return int((root / "netd.pid").read_text())

    a = SimExecutor(root, {"n1": {}})
    first = pid()
    assert a.run("n1", ["true"]).rc == 0
    a.close()
    assert netd.running(root) and pid() == first                # let go of, still up
    b = SimExecutor(root, {"n1": {}})
    assert b.run("n1", ["true"]).rc == 0 and pid() == first      # taken over, not started again
    b.close()
    monkeypatch.setenv("K3SIM_CLOCK_OFFSET", "2h")
    c = SimExecutor(root, {"n1": {}})
    assert c.run("n1", ["true"]).rc == 0 and pid() != first      # another environment: a new daemon
    c.close()
    assert root.absolute() in transport.stop_let_go()
    assert not netd.running(root) and transport.stop_let_go() == []
    # a killed process's daemon is left as it is: forgotten, never stopped by this process
    d = SimExecutor(root, {"n1": {}})
    d.close()
    transport.forget_let_go()
    assert transport.stop_let_go() == [] and netd.running(root)
    netd.stop(root)
    assert not netd.running(root)
