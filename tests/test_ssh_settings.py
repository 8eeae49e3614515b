"""How a host's SSH settings resolve from Ansible's variables, the environment and ansible.cfg,
with ansible-core itself as the reference where it has one (its config file search, its
ssh plugin's variable names and their precedence)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from k3rollout.errors import InputError
from k3rollout.transport.sshconf import AnsibleCfg, Resolver, ansible_cfg_path, render_openssh_config


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    (h / ".ssh").mkdir(parents=True)
    (h / ".ssh" / "known_hosts").write_text("")
    for k in ("k1", "k2", "k3"):
        (h / k).write_text("key")
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return h


def test_ansible_cfg_is_found_where_ansible_core_finds_it(home, tmp_path, monkeypatch):
    from ansible.config.manager import find_ini_config_file

    work = Path.cwd()
    env_cfg = tmp_path / "elsewhere" / "ansible.cfg"
    env_cfg.parent.mkdir()
    steps = [
        ("none", lambda: None),
        ("home", lambda: (home / ".ansible.cfg").write_text("[defaults]\n")),
        ("cwd", lambda: (work / "ansible.cfg").write_text("[defaults]\n")),
        ("world-writable cwd", lambda: work.chmod(0o777)),
        ("env file", lambda: (env_cfg.write_text("[defaults]\n"), monkeypatch.setenv("ANSIBLE_CONFIG", str(env_cfg)))),
        ("env dir", lambda: monkeypatch.setenv("ANSIBLE_CONFIG", str(env_cfg.parent))),
    ]
    seen = set()
    for what, step in steps:
        step()
        ours = ansible_cfg_path()
        theirs = find_ini_config_file()
        assert (str(ours) if ours else None) == theirs, what
        seen.add(ours)
    work.chmod(0o755)
    assert len(seen) >= 3


def test_connection_variables_their_aliases_and_precedence(home, tmp_path, monkeypatch):
    """The later-listed alias of a setting wins (ansible-core's ssh plugin), a host variable
    beats the environment, which beats ansible.cfg."""
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(f"[defaults]\nremote_user = cfguser\nremote_port = 2201\nprivate_key_file = {home}/k3\n"
                   "timeout = 33\n[privilege_escalation]\nbecome = true\nbecome_user = svc\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(cfg))
    r = Resolver().resolve("n1", {})
    assert (r.hop.address, r.hop.port, r.hop.user, r.hop.key_files) == ("n1", 2201, "cfguser", (f"{home}/k3",))
    assert r.connect_timeout == 33 and r.become and r.become_user == "svc"
    monkeypatch.setenv("ANSIBLE_REMOTE_USER", "envuser")
    monkeypatch.setenv("ANSIBLE_REMOTE_PORT", "2202")
    r = Resolver().resolve("n1", {})
    assert (r.hop.port, r.hop.user) == (2202, "envuser")
    hv = {"ansible_host": "10.0.0.1", "ansible_ssh_host": "10.0.0.2", "ansible_port": 22, "ansible_ssh_port": 2203,
          "ansible_user": "a", "ansible_ssh_user": "b", "ansible_private_key_file": f"{home}/k1",
          "ansible_ssh_private_key_file": f"{home}/k2", "ansible_password": "p1", "ansible_ssh_pass": "p2",
          "ansible_become_user": "u2", "ansible_become_pass": "bp", "ansible_ssh_timeout": 7}
    r = Resolver().resolve("n1", hv)
    assert (r.hop.address, r.hop.port, r.hop.user, r.hop.key_files) == ("10.0.0.2", 2203, "b", (f"{home}/k2",))
    assert (r.password, r.become_user, r.become_password, r.connect_timeout) == ("p2", "u2", "bp", 7)
    assert Resolver().resolve("n1", {**hv, "ansible_ssh_password": "p3"}).password == "p3"
    # a named key that is missing is an error naming the host and the variable
    with pytest.raises(InputError, match="host n1: host variable ansible_ssh_private_key_file names .*/nokey"):
        Resolver().resolve("n1", {"ansible_ssh_private_key_file": f"{home}/nokey"})
    with pytest.raises(InputError, match="sudo only"):
        Resolver().resolve("n1", {"ansible_become": True, "ansible_become_method": "su"})


def test_ansible_core_agrees_on_the_variable_names(home):
    """Every connection variable read here is one ansible-core's ssh plugin (or sudo become
    plugin) declares, listed in the same order (the later one wins)."""
    import yaml
    from ansible.plugins.loader import become_loader, connection_loader

    def doc(loader, name: str) -> dict:
        text = Path(loader.find_plugin_with_context(name).plugin_resolved_path).read_text()
        return yaml.safe_load(text.split('DOCUMENTATION = """')[1].split('"""')[0])["options"]

    opts = doc(connection_loader, "ssh")

    def names(o: str) -> list[str]:
        return [v["name"] for v in opts[o].get("vars", [])]

    assert names("host")[1:3] == ["ansible_host", "ansible_ssh_host"]
    assert names("port") == ["ansible_port", "ansible_ssh_port"]
    assert names("remote_user") == ["ansible_user", "ansible_ssh_user"]
    assert names("password") == ["ansible_password", "ansible_ssh_pass", "ansible_ssh_password"]
    assert names("private_key_file") == ["ansible_private_key_file", "ansible_ssh_private_key_file"]
    assert names("host_key_checking") == ["ansible_host_key_checking", "ansible_ssh_host_key_checking"]
    assert names("ssh_common_args") == ["ansible_ssh_common_args"]
    assert names("ssh_extra_args") == ["ansible_ssh_extra_args"]
    bdoc = doc(become_loader, "sudo")
    assert [v["name"] for v in bdoc["become_user"]["vars"]] == ["ansible_become_user", "ansible_sudo_user"]
    assert [v["name"] for v in bdoc["become_pass"]["vars"]] == ["ansible_become_password", "ansible_become_pass",
                                                                 "ansible_sudo_pass"]


@pytest.mark.parametrize("hv, cfg, words", [
    ({"ansible_host_key_checking": "no"}, "", ["host variable ansible_host_key_checking"]),
    ({"ansible_ssh_host_key_checking": False}, "", ["ansible_ssh_host_key_checking"]),
    ({}, "[defaults]\nhost_key_checking = False\n", ["[defaults] host_key_checking"]),
    ({}, "[ssh_connection]\nhost_key_checking = no\n", ["[ssh_connection] host_key_checking"]),
    ({}, "[ssh_connection]\nssh_args = -o StrictHostKeyChecking=no\n", ["StrictHostKeyChecking no",
                                                                        "[ssh_connection] ssh_args"]),
    ({"ansible_ssh_extra_args": "-o UserKnownHostsFile=/dev/null -oStrictHostKeyChecking=off"}, "",
     ["StrictHostKeyChecking off", "ansible_ssh_extra_args"]),
])
def test_lowering_host_key_checking_is_refused_naming_host_and_source(hv, cfg, words, home, tmp_path, monkeypatch):
    if cfg:
        (tmp_path / "ansible.cfg").write_text(cfg)
        monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "ansible.cfg"))
    with pytest.raises(InputError) as e:
        Resolver().resolve("gpu-07", hv)
    msg = str(e.value)
    assert msg.startswith("host gpu-07: ") and "never lowers" in msg and "Nothing was changed" in msg
    for w in words:
        assert w in msg


def test_strictness_may_go_up(home, tmp_path, monkeypatch):
    """A setting that keeps or raises the check is fine: true, yes, and a command-line
    StrictHostKeyChecking=yes over a config file's ``no``."""
    (tmp_path / "ansible.cfg").write_text("[defaults]\nhost_key_checking = True\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "ansible.cfg"))
    (home / ".ssh" / "config").write_text("Host *\n  StrictHostKeyChecking no\n")
    with pytest.raises(InputError, match=r"StrictHostKeyChecking no \(.*\.ssh/config \(Host n1\)\)"):
        Resolver().resolve("n1", {})
    Resolver().resolve("n1", {"ansible_ssh_common_args": "-o StrictHostKeyChecking=yes",
                              "ansible_host_key_checking": "yes"})
    (home / ".ssh" / "config").write_text("Host *\n  HostKeyAlias other\n")
    with pytest.raises(InputError, match="HostKeyAlias"):
        Resolver().resolve("n1", {})


def test_known_hosts_files_and_the_openssh_config_written_for_ansible(home, tmp_path):
    (home / ".ssh" / "config").write_text(
        f"Host b1\n  HostName 127.0.0.5\n  User jump\n  IdentityFile {home}/k1\n"
        f"Host n*\n  ProxyJump b1,ops@b2:2222\n  UserKnownHostsFile {home}/kh1 {home}/kh2\n")
    (home / "kh1").write_text("")
    r = Resolver().resolve("n1", {"ansible_user": "root"})
    assert r.known_hosts[0] == f"{home}/kh1" and f"{home}/kh2" not in r.known_hosts     # kh2 does not exist
    text, alias = render_openssh_config(r)
    assert alias == "k3target"
    blocks = {b.split("\n")[0]: b for b in text.split("\n\n") if b.startswith("Host ")}
    assert set(blocks) == {"Host k3hop0", "Host k3hop1", "Host k3target"}
    assert "HostName 127.0.0.5" in blocks["Host k3hop0"] and "User jump" in blocks["Host k3hop0"]
    assert "HostName b2" in blocks["Host k3hop1"] and "Port 2222" in blocks["Host k3hop1"]
    assert "User ops" in blocks["Host k3hop1"] and "ProxyJump k3hop0" in blocks["Host k3hop1"]
    assert "ProxyJump k3hop1" in blocks["Host k3target"] and "User root" in blocks["Host k3target"]
    for b in blocks.values():
        assert "StrictHostKeyChecking yes" in b and f"UserKnownHostsFile {home}/kh1" in b
    (home / "kh1").unlink()
    (home / ".ssh" / "known_hosts").unlink()
    if not any(os.path.exists(p) for p in ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")):
        with pytest.raises(InputError, match="host n1: no known_hosts file exists"):
            Resolver().resolve("n1", {})


def test_an_unreadable_ansible_cfg_names_the_file(home, tmp_path, monkeypatch):
    (tmp_path / "ansible.cfg").write_text("no section header\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "ansible.cfg"))
    with pytest.raises(InputError, match="ansible.cfg"):
        AnsibleCfg.load()


def test_include_is_read_in_place(home):
    (home / ".ssh" / "conf.d").mkdir()
    (home / ".ssh" / "conf.d" / "10-gpu.conf").write_text("Host gpu-*\n  HostName 10.1.2.3\n  Port 2022\n")
    (home / ".ssh" / "config").write_text("Include conf.d/*.conf\nHost *\n  User ops\n  Port 2200\n")
    r = Resolver().resolve("gpu-01", {})
    assert (r.hop.address, r.hop.port, r.hop.user) == ("10.1.2.3", 2022, "ops")
    assert Resolver().resolve("cpu-01", {}).hop.port == 2200


def test_the_paramiko_connections_own_names_for_host_key_checking(home):
    with pytest.raises(InputError, match="ansible_paramiko_host_key_checking"):
        Resolver().resolve("n1", {"ansible_connection": "paramiko", "ansible_paramiko_host_key_checking": False})
    Resolver().resolve("n1", {"ansible_connection": "paramiko", "ansible_paramiko_host_key_checking": True})


def test_a_client_whose_connection_is_gone_raises_what_the_transport_reports_as_lost():
    # paramiko answers get_transport() with None once a client's connection is gone; opening a
    # session on it raised AttributeError, which no caller read as a lost connection
    import paramiko

    from k3rollout.transport.ssh import live_transport

    with pytest.raises(paramiko.SSHException, match="the SSH connection is closed"):
        live_transport(paramiko.SSHClient())
