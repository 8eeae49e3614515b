"""Pre-staging: done while a node still serves, before its cordon, installing nothing."""

import json

from support import commands, host_timeline, journal, result, sim_state, write_inventory, write_playbook

from k3rollout.cli import main
from k3sim import state as st
from k3sim.dispatch import dispatch as run_cmd


def _digest():
    return st.REGISTRY["vllm/vllm-openai:kimi-k3"]["digest"]


def _run(tmp_path, hosts, prestage, name="run", **over):
    inv = write_inventory(tmp_path / f"inv-{name}", hosts)
    pb = write_playbook(tmp_path / f"pb-{name}.yml", prestage=prestage, **over)
    run_dir = tmp_path / name
    code = main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir)])
    return code, run_dir


def test_prestage_runs_before_cordon_and_changes_no_installed_package(tmp_path):
    weights = {"/models/kimi-k3/MANIFEST.sha256": {"/models/kimi-k3/model-00001.safetensors": "ok",
                                                    "/models/kimi-k3/model-00002.safetensors": "ok"}}
    hosts = {f"gpu-{i:02d}": {"sim_weights": weights} for i in range(1, 4)}
    code, run_dir = _run(tmp_path, hosts, {"parallel": 2, "min_free_gib": 100, "image_digest": _digest(),
                                           "weights_manifest": "/models/kimi-k3/MANIFEST.sha256"},
                         serial=1, min_serving=1)
    assert code == 0
    assert all(n["final"] == "upgraded" for n in result(run_dir)["nodes"].values())
    recs = journal(run_dir)
    first_batch = next(r["seq"] for r in recs if r["type"] == "batch_started")
    for node in hosts:
        # the node's commands and the Kubernetes API's changes to it (the cordon and drain run
        # from the controller through the API), in time order
        cmds = host_timeline(run_dir, node)
        download = next(i for i, c in enumerate(cmds) if c.startswith("apt-get install --download-only"))
        drain = next(i for i, c in enumerate(cmds) if c.startswith("PATCH") and '"unschedulable": true' in c)
        install = next(i for i, c in enumerate(cmds) if c.startswith("apt-get install") and "--download-only" not in c)
        assert download < drain < install
        # containerd nodes: the image goes into the kubelet's store (crictl), pinned by digest
        assert any(c.startswith(f"crictl pull vllm/vllm-openai@{_digest()}") for c in cmds[:drain])
        assert any(c.startswith("sha256sum --check") for c in cmds[:drain])
        # nothing before the drain installs, removes or stops anything
        assert not [c for c in cmds[:drain] if c.startswith(("apt-get install", "dpkg ", "systemctl stop", "reboot",
                                                              "docker stop", "docker rm", "kubectl cordon"))
                    and "--download-only" not in c]
        done = next(r for r in recs if r["type"] == "prestage_done" and r["node"] == node)
        assert done["ok"] and done["seq"] < first_batch
        # baseline ran after pre-staging and still read the old driver's packages
        base = next(r for r in recs if r["type"] == "facts" and r["node"] == node and r["stage"] == "baseline")
        assert base["seq"] > done["seq"]
        vers = [p["version"] for p in base["facts"]["driver_packages"]]
        assert any(v.startswith("575.57.08") for v in vers) and not any(v.startswith("580") for v in vers)
        pre = next(r for r in recs if r["type"] == "facts" and r["node"] == node and r["stage"] == "prestage")
        staged = pre["facts"]["prestage"]["staged"]
        assert staged and all("580.95.05" in f for f in staged)
        assert pre["facts"]["prestage"]["weights_verified"] is True
        assert pre["facts"]["prestage"]["image_digest"] == _digest()
        up = next(r for r in recs if r["type"] == "facts" and r["node"] == node and r["stage"] == "driver_upgrade")
        assert up["facts"]["staged_intact"] is True
    # evidence of pre-staging is in the store
    manifest = (run_dir / "evidence" / "MANIFEST.sha256").read_text()
    assert "00-prestage/download-driver" in manifest


def test_prestage_bounds_nodes_at_a_time(tmp_path):
    hosts = {f"gpu-{i:02d}": {"sim_latency_s": 0.01} for i in range(1, 7)}
    code, run_dir = _run(tmp_path, hosts, {"parallel": 2}, serial=6, min_serving=0)
    assert code == 0
    live, most = set(), 0
    for r in journal(run_dir):
        if r["type"] == "prestage_started":
            live.add(r["node"])
            most = max(most, len(live))
        elif r["type"] == "prestage_done":
            live.discard(r["node"])
    assert most == 2


def test_prestage_short_of_disk_halts_before_any_change(tmp_path):
    hosts = {"gpu-01": {}, "gpu-02": {"sim_disk_free_gib": 20}}
    code, run_dir = _run(tmp_path, hosts, {"min_free_gib": 50}, serial=1, min_serving=0)
    assert code == 1
    res = result(run_dir)
    assert res["status"] == "halted"
    halt = next(r for r in journal(run_dir) if r["type"] == "run_halted")
    assert halt["kind"] == "prestage" and "gpu-02" in halt["reason"] and "20 GiB free" in halt["reason"]
    assert "gpu-01:" not in halt["reason"]
    assert all(n["final"] == "pending" for n in res["nodes"].values())
    assert not [r for r in journal(run_dir) if r["type"] == "batch_started"]
    for node, hv in hosts.items():
        assert not [c for c in commands(run_dir, node) if c.startswith(("kubectl drain", "kubectl cordon"))]
        fresh = st.init_host(tmp_path / "fresh" / node, node, hv)
        assert sim_state(run_dir, node)["packages"] == json.loads((fresh / "state.json").read_text())["packages"]


def test_sim_apt_download_only_fills_the_cache_within_free_space(tmp_path):
    d = st.init_host(tmp_path / "h", "h", {"sim_disk_free_gib": 1})
    before = json.loads((d / "state.json").read_text())["packages"]
    pins = [f"{n}={v}" for n, v in _target_pins(d)]
    r = run_cmd(d, ["apt-get", "install", "--download-only", "-y", *pins])
    assert r.rc == 0 and r.stdout.rstrip().endswith("Download complete and in download only mode")
    assert "Need to get" in r.stdout and "Get:1 " in r.stdout
    after = json.loads((d / "state.json").read_text())
    assert after["packages"] == before
    listing = run_cmd(d, ["find", "/var/cache/apt/archives", "-maxdepth", "1", "-name", "*.deb",
                                    "-printf", "%s %f\\n"]).stdout.splitlines()
    assert len(listing) == len(pins) and all(line.split()[1].endswith("_amd64.deb") for line in listing)
    # again: nothing left to fetch
    again = run_cmd(d, ["apt-get", "install", "--download-only", "-y", *pins])
    assert again.rc == 0 and "Need to get 0 B/" in again.stdout and "Get:" not in again.stdout
    # df counts the cache as used
    free = int(run_cmd(d, ["df", "-B1", "--output=target,avail", "/var"]).stdout.split()[-1])
    assert free == 1024 ** 3 - sum(int(line.split()[0]) for line in listing)
    run_cmd(d, ["apt-get", "clean"])
    assert run_cmd(d, ["find", "/var/cache/apt/archives", "-printf", "%s %f\\n"]).stdout == ""
    # too little space: apt says what it would fetch, then refuses (exit 100)
    tiny = st.init_host(tmp_path / "t", "t", {"sim_disk_free_gib": 0})
    r = run_cmd(tiny, ["apt-get", "install", "--download-only", "-y", *pins])
    assert r.rc == 100 and r.stderr == "E: You don't have enough free space in /var/cache/apt/archives/.\n"
    assert "Need to get" in r.stdout


def _target_pins(d):
    from k3sim import repos

    s = json.loads((d / "state.json").read_text())
    offers = repos.offers(s)
    return [(n, rows[0]["version"]) for n, rows in offers.items()
            if any(r["version"].startswith("580.95.05") for r in rows) and n.startswith(("nvidia-", "libnvidia-"))
            for rows in [[r for r in rows if r["version"].startswith("580.95.05")]]]


def test_plan_puts_prestage_ahead_of_the_batches(tmp_path):
    from k3rollout.model import load_inventory, load_playbook
    from k3rollout.plan import make_plan

    inv = load_inventory(write_inventory(tmp_path / "inv", {f"gpu-{i:02d}": {} for i in range(1, 9)}))
    plain = make_plan(load_playbook(write_playbook(tmp_path / "a.yml")), inv)
    pre = make_plan(load_playbook(write_playbook(tmp_path / "b.yml", prestage={"parallel": 3, "estimate": "10m"})),
                    inv)
    assert "prestage" not in plain.timing and plain.batches[0].start_offset_s == 0
    # 8 nodes, 3 at a time: three rounds of 10 minutes before batch 1
    assert pre.timing["prestage"]["ahead_s"] == 1800 and pre.batches[0].start_offset_s == 1800
    assert pre.total_estimate_s == plain.total_estimate_s + 1800
    assert pre.timing["serial_makespan_s"] == plain.timing["serial_makespan_s"]
    assert any(n.startswith("pre-staging first: 8 node(s), 3 at a time") for n in pre.notes)


def test_driver_stage_sees_a_cache_emptied_since_prestaging(tmp_path):
    from k3rollout.stages.driver.host import check_staged
    from k3rollout.transport.base import CommandResult

    d = st.init_host(tmp_path / "h", "h", {})
    pins = [f"{n}={v}" for n, v in _target_pins(d)]
    assert run_cmd(d, ["apt-get", "install", "--download-only", "-y", *pins]).rc == 0
    listing = run_cmd(d, ["find", "/var/cache/apt/archives", "-maxdepth", "1", "-name", "*.deb",
                          "-printf", "%s %f\\n"]).stdout
    staged = {ln.split()[1]: int(ln.split()[0]) for ln in listing.splitlines()}

    class Ctx:
        facts = {"prestage": {"staged": staged}}

        def step(self, name, argv):
            r = run_cmd(d, argv)
            return CommandResult(host="h", argv=tuple(argv), rc=r.rc, stdout=r.stdout, stderr=r.stderr, duration_s=0.0)

    assert check_staged(Ctx()) == {"staged_intact": True, "staged_missing": [], "staged_changed": []}
    run_cmd(d, ["apt-get", "clean"])
    got = check_staged(Ctx())
    assert got["staged_intact"] is False and sorted(got["staged_missing"]) == sorted(staged)
