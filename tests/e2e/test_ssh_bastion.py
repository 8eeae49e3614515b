"""Both transports through a bastion, as an OpenSSH user's ~/.ssh/config names it.

The sshd hosts (tests/support/sshd_hosts.py) get a jump host that runs no commands and logs every
connection it forwards; each target logs every connection it accepts. A test proves the hop
was used by finding, for each target, exactly as many accepted connections as the bastion
forwarded to it: a connection made around the bastion would make the counts differ.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from support import write_playbook

from k3rollout.cli import main
from k3rollout.transport.ssh import HostKeyError, SSHExecutor
from k3sim.state import executed


@pytest.fixture
def bastion_cluster(sshd_cluster, tmp_path, monkeypatch):
    """``with bastion_cluster({...}) as c``: sshd hosts behind a bastion, and a HOME whose
    ~/.ssh/config reaches them by alias through it (``c.home``)."""
    from support.sshd_hosts import SSHDCluster

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)

    def make(hosts: dict[str, dict]) -> SSHDCluster:
        c = sshd_cluster(hosts, bastion=True)
        c.home = home
        return c

    return make


def alias_inventory(path: Path, c, hosts: list[str], **extra) -> Path:
    """Hosts named by their ~/.ssh/config alias only: no address, port, user or key here."""
    inv = {"all": {"vars": {"ansible_connection": "ssh", "k3_known_hosts_file": str(c.known_hosts),
                            "ansible_python_interpreter": "/usr/bin/python3", "scheduler": "kubernetes",
                            "k3_reboot_search_paths": [str(c.bin)], **extra},
                   "children": {"gpu_nodes": {"hosts": {h: {} for h in hosts}}}}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(inv, sort_keys=False))
    return path


def ansible_tasks(target, hv: dict, tmp: Path):
    """Run a one-task file through ansible-runner and real ansible-playbook, as the driver stage does."""
    from k3rollout.toolpaths import require_tool
    from k3rollout.transport.ansible import run_tasks

    tmp.mkdir(parents=True, exist_ok=True)
    tasks = tmp / "tasks.yml"
    tasks.write_text("- name: Read the GPUs\n  ansible.builtin.command: nvidia-smi -L\n")
    return run_tasks(target, hv, tasks, {}, tmp / "private", timeout=120, on_event=lambda ev: None,
                     binary=require_tool("ansible-playbook", "test"))


def test_an_ssh_config_alias_through_a_bastion_on_both_transports(bastion_cluster, tmp_path):
    """gpu-01 is only an alias in ~/.ssh/config (HostName, Port, User, IdentityFile, ProxyJump);
    the bastion has a key of its own. paramiko and ansible-playbook both reach the node, and
    every connection the node accepted is one the bastion forwarded."""
    with bastion_cluster({"gpu-01": {}, "gpu-02": {}}) as c:
        c.ssh_config(c.home / ".ssh" / "config",
                     extra={"gpu-02": ["ProxyJump bastion,bastion"]})       # a chain: the bastion via itself
        hv = {"ansible_connection": "ssh", "k3_known_hosts_file": str(c.known_hosts),
              "ansible_python_interpreter": "/usr/bin/python3"}
        ex = SSHExecutor({"gpu-01": hv, "gpu-02": hv})
        for h in ("gpu-01", "gpu-02"):
            t = ex.targets[h]
            assert (t.address, t.port, t.user) == ("127.0.0.1", c.hosts[h].port, "root")
            assert f"via root@127.0.0.1:{c.bastion.port}" in t.via
            r = ex.run(h, ["nvidia-smi", "-L"])
            assert r.ok and r.stdout.count("NVIDIA B300 SXM6 AC") == 8      # support.DEFAULT_GPU
        assert ex.targets["gpu-02"].via.count(f"127.0.0.1:{c.bastion.port}") == 2
        ex.close()
        assert c.forwarded("gpu-01") == c.accepted("gpu-01") == 1
        assert c.forwarded("gpu-02") == c.accepted("gpu-02") == 1
        res = ansible_tasks(ex.targets["gpu-01"], hv, tmp_path)
        assert res.rc == 0 and not res.unreachable, res.stdout
        assert any(e["event"] == "runner_on_ok" and e["task"] == "Read the GPUs" for e in res.events)
        assert executed(c.hosts["gpu-01"].state).count("nvidia-smi -L") == 2
        # ansible-playbook's ssh went through the bastion too: still no connection around it
        assert c.forwarded("gpu-01") == c.accepted("gpu-01") >= 2
        # the ssh_config OpenSSH was given is kept beside the run's artifacts
        assert "ProxyJump k3hop0" in (tmp_path / "private" / "ssh_config").read_text()


def test_a_proxycommand_in_ansible_ssh_common_args(bastion_cluster, tmp_path):
    """No ssh config at all: the bastion is an OpenSSH ProxyCommand in the inventory, the
    way many Ansible inventories say it."""
    with bastion_cluster({"gpu-01": {}}) as c:
        b = c.bastion
        proxy = (f"ssh -o UserKnownHostsFile={c.known_hosts} -o StrictHostKeyChecking=yes -o BatchMode=yes "
                 f"-i {c.bastion_key} -p {b.port} -W %h:%p root@127.0.0.1")
        hv = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": c.hosts["gpu-01"].port,
              "ansible_ssh_user": "root", "ansible_ssh_private_key_file": str(c.client_key),
              "ansible_ssh_common_args": f"-o ProxyCommand=\"{proxy}\"",
              "k3_known_hosts_file": str(c.known_hosts), "ansible_python_interpreter": "/usr/bin/python3"}
        ex = SSHExecutor({"gpu-01": hv})
        assert ex.targets["gpu-01"].hop.proxy_command.endswith(f"-W 127.0.0.1:{c.hosts['gpu-01'].port} root@127.0.0.1")
        assert ex.run("gpu-01", ["true"]).ok
        ex.close()
        res = ansible_tasks(ex.targets["gpu-01"], hv, tmp_path)
        assert res.rc == 0, res.stdout
        assert c.forwarded("gpu-01") == c.accepted("gpu-01") == 2


def test_an_impostor_behind_the_bastion_is_refused_by_both_transports(bastion_cluster, tmp_path):
    """known_hosts holds another key for the target (or for the bastion): paramiko refuses
    at the handshake, naming the hop, and so does ansible-playbook's OpenSSH; nothing runs."""
    with bastion_cluster({"gpu-01": {}, "gpu-02": {}}) as c:
        c.ssh_config(c.home / ".ssh" / "config")
        p1 = c.hosts["gpu-01"].port
        good = c.known_hosts.read_text()
        # gpu-01's entry now holds gpu-02's key: the host answering is not the one we know
        c.known_hosts.write_text(good.replace(f"[127.0.0.1]:{p1} ssh-ed25519 {c.hosts['gpu-01'].host_pub}",
                                              f"[127.0.0.1]:{p1} ssh-ed25519 {c.hosts['gpu-02'].host_pub}"))
        hv = {"ansible_connection": "ssh", "k3_known_hosts_file": str(c.known_hosts),
              "ansible_python_interpreter": "/usr/bin/python3"}
        ex = SSHExecutor({"gpu-01": hv})
        with pytest.raises(HostKeyError, match=rf"CHANGED for 127.0.0.1:{p1} "):
            ex.run("gpu-01", ["true"])
        ex.close()
        res = ansible_tasks(ex.targets["gpu-01"], hv, tmp_path / "a")
        assert res.rc != 0 and res.unreachable
        assert "host key" in res.stdout.lower() and "verification failed" in res.stdout.lower(), res.stdout
        assert executed(c.hosts["gpu-01"].state) == []
        assert c.forwarded("gpu-01") == 2        # both did go through the bastion, and stopped there
        # an impostor bastion: refused before any forward, the error names the jump host
        c.known_hosts.write_text(good.replace(c.bastion.host_pub, c.hosts["gpu-02"].host_pub))
        ex = SSHExecutor({"gpu-02": hv})
        with pytest.raises(HostKeyError, match=rf"CHANGED for 127.0.0.1:{c.bastion.port} \(jump host on the way "
                                               "to gpu-02\\)"):
            ex.run("gpu-02", ["true"])
        ex.close()
        res = ansible_tasks(ex.targets["gpu-02"], hv, tmp_path / "b")
        # (OpenSSH's jump process says why on its own stderr; ansible reports the node unreachable)
        assert res.rc != 0 and res.unreachable, res.stdout
        # neither got past the bastion's handshake: nothing forwarded, nothing run
        assert c.forwarded("gpu-02") == c.accepted("gpu-02") == 0 and executed(c.hosts["gpu-02"].state) == []


@pytest.mark.parametrize("how", ["inventory", "ansible.cfg", "environment", "ssh_config", "ssh_common_args"])
def test_turning_host_key_checking_off_is_refused_before_any_node_is_touched(how, bastion_cluster, tmp_path,
                                                                               monkeypatch, capsys):
    """``ansible_host_key_checking: false`` made paramiko accept an impostor while Ansible
    (forced strict) refused it only after the node was drained. Now no setting lowers the
    check on either transport: the run is refused at once, exit 2, naming the host and the
    setting, with the impostor's node never contacted."""
    with bastion_cluster({"gpu-01": {}}) as c:
        extra_cfg = {"gpu-01": ["StrictHostKeyChecking no"]} if how == "ssh_config" else None
        c.ssh_config(c.home / ".ssh" / "config", extra=extra_cfg)
        # an impostor: gpu-01's known key is not the key it presents
        c.known_hosts.write_text(c.known_hosts.read_text().replace(c.hosts["gpu-01"].host_pub,
                                                                   c.bastion.host_pub))
        extra: dict = {}
        if how == "inventory":
            extra["ansible_host_key_checking"] = False
        elif how == "ssh_common_args":
            extra["ansible_ssh_common_args"] = "-o StrictHostKeyChecking=accept-new"
        elif how == "ansible.cfg":
            (tmp_path / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
        elif how == "environment":
            monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "no")
        inv = alias_inventory(tmp_path / "inv" / "hosts.yml", c, ["gpu-01"], **extra)
        pb = write_playbook(tmp_path / "pb.yml", min_serving=0, reboot_timeout=30)
        for verb in ("validate", "run"):
            run_dir = tmp_path / f"run-{verb}"
            argv = [verb, str(pb), "-i", str(inv)] + (["--yes", "--run-dir", str(run_dir)] if verb == "run" else [])
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert "gpu-01" in err and "Nothing was changed" in err, err
            where = {"inventory": "ansible_host_key_checking", "ansible.cfg": "ansible.cfg [defaults] "
                     "host_key_checking", "environment": "ANSIBLE_HOST_KEY_CHECKING",
                     "ssh_config": ".ssh/config (Host gpu-01)", "ssh_common_args": "ansible_ssh_common_args"}[how]
            assert where in err, err
            assert not (run_dir / "journal.jsonl").exists()
        st = json.loads((c.hosts["gpu-01"].state / "state.json").read_text())
        assert executed(c.hosts["gpu-01"].state) == [] and st["scheduler"]["state"] == "schedulable"
        assert c.forwarded("gpu-01") == c.accepted("gpu-01") == 0


def test_ssh_agent_and_the_default_keys(bastion_cluster, tmp_path, monkeypatch):
    """No key named anywhere: the agent's key is used; without an agent, ~/.ssh/id_ed25519;
    with neither, a clear authentication error."""
    with bastion_cluster({"gpu-01": {}}) as c:
        port = c.hosts["gpu-01"].port
        hv = {"ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "root",
              "k3_known_hosts_file": str(c.known_hosts)}
        from k3rollout.transport.ssh import AuthError

        with pytest.raises(AuthError, match="root@127.0.0.1"):
            SSHExecutor({"gpu-01": hv}).run("gpu-01", ["true"])
        sock = tmp_path / "agent.sock"
        agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
        try:
            env = {"SSH_AUTH_SOCK": str(sock), "PATH": "/usr/bin:/bin"}
            # the agent answers once `ssh-add -l` can reach it (exit 1: no identities; 2: no
            # agent); on a loaded machine its socket took over 2 s to appear
            deadline = time.monotonic() + 30
            while subprocess.run(["ssh-add", "-l"], env=env, capture_output=True).returncode == 2:
                assert time.monotonic() < deadline, "ssh-agent did not answer within 30 s"
                time.sleep(0.05)
            subprocess.run(["ssh-add", "-q", str(c.client_key)], env=env, check=True, stderr=subprocess.DEVNULL)
            monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
            ex = SSHExecutor({"gpu-01": hv})
            assert ex.run("gpu-01", ["true"]).ok
            ex.close()
        finally:
            agent.kill()
            agent.wait()
        monkeypatch.delenv("SSH_AUTH_SOCK")
        (c.home / ".ssh").mkdir(exist_ok=True)
        key = c.home / ".ssh" / "id_ed25519"
        key.write_bytes(c.client_key.read_bytes())
        key.chmod(0o600)
        ex = SSHExecutor({"gpu-01": hv})
        assert ex.targets["gpu-01"].hop.look_for_keys and ex.run("gpu-01", ["true"]).ok
        ex.close()


def test_settings_resolve_as_openssh_resolves_them(tmp_path, monkeypatch):
    """The ssh config is read as ``ssh -G`` reads it (the real ssh as reference): Host
    patterns, HostName, Port, User, IdentityFile, ProxyJump; the command-line options
    Ansible builds come first."""
    import shutil

    from k3rollout.transport.sshconf import Resolver, hops_of

    if shutil.which("ssh") is None:
        pytest.skip("no ssh client")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "known_hosts").write_text("")
    (tmp_path / "k1").write_text("x")
    cfg = tmp_path / ".ssh" / "config"
    cfg.write_text(textwrap.dedent(f"""\
        Host jump
          HostName 127.0.0.9
          Port 2201
          User hopper
        Host node-*
          User ops
          Port 2222
          IdentityFile {tmp_path}/k1
          ProxyJump jump
        Host node-7
          HostName 127.0.0.7
          Port 2277
        Host *
          User fallback
        """))
    cases = [("node-7", {}), ("node-8", {"ansible_user": "root"}),
             ("node-8", {"ansible_ssh_common_args": "-o Port=2300 -o ProxyJump=u@127.0.0.5:2205"}),
             ("other", {"ansible_port": 2400}), ("other", {"ansible_ssh_extra_args": "-o HostName=127.0.0.3"})]
    for host, hv in cases:
        r = Resolver(env={"HOME": str(tmp_path)}).resolve(host, hv)
        argv = ["ssh", "-G", "-F", str(cfg)]
        if "ansible_user" in hv:
            argv += ["-o", f"User={hv['ansible_user']}"]
        if "ansible_port" in hv:
            argv += ["-o", f"Port={hv['ansible_port']}"]
        for k in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
            argv += hv.get(k, "").split()
        ref = {}
        for line in subprocess.run(argv + [host], capture_output=True, text=True, check=True).stdout.splitlines():
            k, _, v = line.partition(" ")
            ref.setdefault(k, []).append(v)
        hop = r.hop
        assert hop.address == ref["hostname"][0] and str(hop.port) == ref["port"][0] and hop.user == ref["user"][0]
        want_jump = ref.get("proxyjump", [None])[0]
        jumps = hops_of(hop)[:-1]
        got_jump = ",".join(f"{j.alias}" for j in jumps) if jumps else None
        if want_jump and "@" in want_jump:
            j = jumps[0]
            assert f"{j.user}@[{j.address}]:{j.port}" == want_jump, (host, hv)
        else:
            assert got_jump == want_jump, (host, hv)
        if hop.key_files:
            assert [str(Path(k)) for k in hop.key_files] == [x for x in ref["identityfile"]
                                                             if Path(x).exists()], (host, hv)
    # a jump host's own settings come from its Host block
    j = hops_of(Resolver(env={}).resolve("node-7", {}).hop)[0]
    assert (j.address, j.port, j.user) == ("127.0.0.9", 2201, "hopper")


def test_a_revoked_key_is_refused_by_both_transports(bastion_cluster, tmp_path):
    """known_hosts lists the node's key and also marks it ``@revoked``: OpenSSH refuses it,
    and so does the paramiko transport (paramiko itself skips such lines)."""
    with bastion_cluster({"gpu-01": {}}) as c:
        c.ssh_config(c.home / ".ssh" / "config")
        with c.known_hosts.open("a") as f:
            f.write(f"@revoked * ssh-ed25519 {c.hosts['gpu-01'].host_pub}\n")
        hv = {"ansible_connection": "ssh", "k3_known_hosts_file": str(c.known_hosts),
              "ansible_python_interpreter": "/usr/bin/python3"}
        ex = SSHExecutor({"gpu-01": hv})
        with pytest.raises(HostKeyError, match="REVOKED"):
            ex.run("gpu-01", ["true"])
        ex.close()
        res = ansible_tasks(ex.targets["gpu-01"], hv, tmp_path)
        assert res.rc != 0 and res.unreachable, res.stdout
        assert executed(c.hosts["gpu-01"].state) == []


def test_openssh_checks_each_host_key_before_anything_runs(bastion_cluster, tmp_path, monkeypatch):
    """With the Ansible path's ssh given, a host's first connection also has OpenSSH check
    its key through the same hops, logging in to nothing. Were OpenSSH to see the host
    otherwise than paramiko does (here: its ssh_config made to name another known_hosts),
    the host is refused at once, before any command runs on it, never after a drain."""
    import shutil

    from k3rollout.transport import ssh as ssh_mod

    with bastion_cluster({"gpu-01": {}}) as c:
        c.ssh_config(c.home / ".ssh" / "config")
        hv = {"ansible_connection": "ssh", "k3_known_hosts_file": str(c.known_hosts)}
        ex = SSHExecutor({"gpu-01": hv}, openssh=shutil.which("ssh"))
        assert ex.run("gpu-01", ["nvidia-smi", "-L"]).ok and ex.run("gpu-01", ["true"]).ok
        ex.close()
        # paramiko's connection and OpenSSH's check, both through the bastion; the check
        # authenticated to nothing and ran nothing
        assert c.forwarded("gpu-01") == c.accepted("gpu-01") == 2
        log = c.hosts["gpu-01"].log.read_text()
        assert log.count("Accepted publickey") == 1 and executed(c.hosts["gpu-01"].state) == ["nvidia-smi -L"]
        impostor = tmp_path / "other_known_hosts"
        impostor.write_text(c.known_hosts.read_text().replace(c.hosts["gpu-01"].host_pub, c.bastion.host_pub))
        real = ssh_mod.render_openssh_config

        def diverging(resolved):
            text, alias = real(resolved)
            return text.replace(str(c.known_hosts), str(impostor)), alias

        monkeypatch.setattr(ssh_mod, "render_openssh_config", diverging)
        ex = SSHExecutor({"gpu-01": hv}, openssh=shutil.which("ssh"))
        with pytest.raises(HostKeyError, match="OpenSSH, which runs the vendor task files through Ansible, refuses"):
            ex.run("gpu-01", ["nvidia-smi", "-L"])
        ex.close()
        assert executed(c.hosts["gpu-01"].state) == ["nvidia-smi -L"]        # nothing more ran
