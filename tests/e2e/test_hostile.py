"""Hostile input: templates in inventory values, secrets in URLs and container
environments, file modes of a run, and input sized to exhaust the machine."""

from __future__ import annotations

import stat
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from support import DOCKER_HOST, cli, journal, write_inventory, write_playbook

from k3rollout.evidence.redact import mask_credentials, masked
from k3rollout.model import load_inventory


def test_inventory_and_extra_vars_are_never_templated_by_ansible(sshd_cluster, tmp_path):
    """A template in a host var or an extra var reaches Ansible as data: nothing runs on
    the controller (real ansible-runner, real ansible-playbook, real sshd)."""
    from k3rollout.toolpaths import require_tool
    from k3rollout.transport import ansible as ansible_transport
    from k3rollout.transport.ssh import SSHExecutor

    marks = {k: tmp_path / f"pwned-{k}" for k in ("interpreter", "hostvar", "extravar", "key")}

    def evil(k: str) -> str:
        return "{{ lookup('pipe', 'touch " + str(marks[k]) + "') }}"

    tasks = tmp_path / "tasks.yml"
    tasks.write_text("- name: show the values\n  ansible.builtin.debug:\n"
                     "    msg: \"{{ k3_note }} | {{ k3_x }} | {{ k3_map.keys() | list }}\"\n"
                     "- name: a module on the host\n  ansible.builtin.command:\n    argv: [true]\n")
    with sshd_cluster({"gpu-01": {}}) as c:
        inv = load_inventory(c.inventory(tmp_path / "inv" / "hosts.yml", host_vars={"gpu-01": {
            "ansible_python_interpreter": evil("interpreter") + "/usr/bin/python3", "k3_note": evil("hostvar"),
            "k3_map": {evil("key"): [1]}}}))
        ex = SSHExecutor({n: h.vars for n, h in inv.hosts.items()})
        events: list[dict] = []
        try:
            res = ansible_transport.run_tasks(ex.targets["gpu-01"], inv.hosts["gpu-01"].vars, tasks,
                                              {"k3_x": evil("extravar")}, tmp_path / "private", timeout=120,
                                              on_event=events.append,
                                              binary=require_tool("ansible-playbook", "the vendor tasks"))
        finally:
            ex.close()
    assert [k for k, p in marks.items() if p.exists()] == []
    # the values arrived as the literal characters the inventory holds
    shown = next(e for e in events if e["event"] == "runner_on_ok" and e["task"] == "show the values")
    assert shown["msg"].startswith(f"{evil('hostvar')} | {evil('extravar')} | ")
    assert evil("key") in shown["msg"]
    # the literal interpreter does not exist on the host: the module task fails, not the controller
    assert res.rc != 0 and res.failed_task == "a module on the host"


class _Hook(BaseHTTPRequestHandler):
    paths: list = []

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.paths.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a):
        pass


def test_secrets_in_urls_and_container_environments_are_masked_and_the_run_is_private(tmp_path):
    """A webhook's ?token= and userinfo, and an HF_TOKEN in the serving container's
    environment, never reach the journal, events, evidence, the playbook copy or the
    reports; masked values keep their sha256. The run dir is 0700, its files 0600,
    evidence 0400."""
    token, password, hf = "wh-tok-5e3a9c1f", "wh-pass-77d1", "hf_sEcReT0123456789"
    srv = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Hook.paths = []
    url = f"http://ops:{password}@127.0.0.1:{srv.server_port}/chatops?channel=gpu&token={token}"
    # Docker hosts: the serving container's environment is what baseline captures
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {"sim_serving_env": {"HF_TOKEN": hf, "HF_HOME": "/data"}},
                                             "gpu-02": {}}, {"sim_reboot_s": 0.01, **DOCKER_HOST})
    pb = write_playbook(tmp_path / "pb.yml", serial=[1, 1], min_serving=0, hooks={"post_batch": [{"webhook": url}]})
    run = tmp_path / "run"
    try:
        p = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run))
    finally:
        srv.shutdown()
    assert p.returncode == 0, p.stderr
    # the hook itself got the real URL
    assert _Hook.paths == [f"/chatops?channel=gpu&token={token}"] * 2
    leaks = []
    for f in run.rglob("*"):
        if f.is_file() and "sim-hosts" not in f.parts:      # the simulated hosts' own state
            data = f.read_bytes()
            leaks += [f"{f.relative_to(run)}: {s}" for s in (token, password, hf) if s.encode() in data]
    assert leaks == []
    # what was masked keeps the digest of its value, so two captures can still be compared
    inspect = next(run.glob("evidence/gpu-01/*baseline*/container-inspect-vllm-serving*")).read_text()
    assert f"HF_TOKEN={masked(hf)}" in inspect and "HF_HOME=/data" in inspect
    copy = next(run.glob("evidence/run/inputs/pb.yml")).read_text()
    assert f"token={masked(token)}" in copy and f"ops:{masked(password)}@" in copy
    started = [r for r in journal(run) if r["type"] == "hook_started"]
    assert started and all(f"token={masked(token)}" in r["target"] for r in started)
    # private: 0700 folders, 0600 files, evidence 0400, whatever the caller's umask
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    modes = {f.relative_to(run).as_posix(): stat.S_IMODE(f.stat().st_mode) for f in run.rglob("*")
             if "sim-hosts" not in f.parts}
    assert {k: oct(m) for k, m in modes.items() if m & 0o077} == {}
    for name in ("journal.jsonl", "report.html", "report.md", "result.json", "events.jsonl", "inputs.json",
                 "evidence/MANIFEST.sha256"):
        assert modes[name] == 0o600, name
    ev = [k for k in modes if k.startswith("evidence/") and (run / k).is_file() and k != "evidence/MANIFEST.sha256"]
    assert len(ev) > 50 and {modes[k] for k in ev} == {0o400}


@pytest.mark.parametrize("text,secret", [
    ("https://hooks.example/x?channel=ops&token=t0k3n-value", "t0k3n-value"),
    ("https://ops:pa55word@hooks.example/x", "pa55word"),
    ("https://blob.example/f?sv=2024&sig=AbC%2Fd3f", "AbC%2Fd3f"),
    ('"Env": ["HF_TOKEN=hf_abcdef123", "PATH=/usr/bin"]', "hf_abcdef123"),
    ("AWS_SECRET_ACCESS_KEY=wJalr/K7MDENG+bPxR", "wJalr/K7MDENG+bPxR"),
    ('"Args": ["--model", "m", "--api-key", "sk-live-123"]', "sk-live-123"),
    ("vllm serve m --api-key=sk-live-456 --port 8000", "sk-live-456"),
    ("docker run -e DB_PASSWORD=hunter22 img", "hunter22"),
])
def test_credentials_are_masked_by_their_shape(text, secret):
    out = mask_credentials(text)
    assert secret not in out and masked(secret) in out
    assert mask_credentials(out) == out                       # masking twice changes nothing


@pytest.mark.parametrize("text", [
    "ssh -o StrictHostKeyChecking=yes -o UserKnownHostsFile=/etc/k3/known_hosts",
    "HF_TOKEN_FILE=/run/secrets/hf KEY_PATH=/etc/k.pem --ssl-keyfile /etc/k.pem kernel.keys.maxkeys=200",
    "https://registry.example/v2/vllm/manifests/kimi-k3?tag=latest",
    "NVIDIA_DISABLE_REQUIRE=true CUDA_VERSION=13.0.1 --tokenizer moonshotai/Kimi-K3",
])
def test_what_is_not_a_credential_is_kept(text):
    assert mask_credentials(text) == text
