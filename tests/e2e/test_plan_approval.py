"""A plan a reviewer approved is what runs: its digest is checked at start and recorded,
and the report diffs the approved plan against what ran."""

from __future__ import annotations

import json

import pytest
from support import forked_cli as cli
from support import journal, result, write_inventory, write_playbook


def _setup(tmp_path, n=3, **play):
    hosts = {f"gpu-{i:02d}": {} for i in range(1, n + 1)}
    inv = write_inventory(tmp_path / "inv", hosts, {"sim_reboot_s": 0.01})
    play.setdefault("serial", [1, 2])
    play.setdefault("min_serving", 0)
    return write_playbook(tmp_path / "pb.yml", **play), inv


def test_run_refuses_a_plan_that_differs_from_the_approved_one(tmp_path):
    pb, inv = _setup(tmp_path)
    p = cli("plan", str(pb), "-i", str(inv), "--json")
    approved = json.loads(p.stdout)
    assert len(approved["plan_sha256"]) == 64
    (tmp_path / "approved.json").write_text(p.stdout)
    # the inventory grows after approval: the batches change, so the run must not start
    write_inventory(tmp_path / "inv", {f"gpu-{i:02d}": {} for i in range(1, 5)}, {"sim_reboot_s": 0.01})
    r = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(tmp_path / "run"),
            "--approved-plan", str(tmp_path / "approved.json"))
    assert r.returncode == 2
    assert "differs from the approved one" in r.stderr and "added: gpu-04" in r.stderr
    assert not (tmp_path / "run" / "journal.jsonl").exists()


def test_matching_plan_runs_and_its_digest_is_recorded(tmp_path):
    pb, inv = _setup(tmp_path)
    p = cli("plan", str(pb), "-i", str(inv), "--json")
    (tmp_path / "approved.json").write_text(p.stdout)
    run = tmp_path / "run"
    r = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run), "--approved-plan",
            str(tmp_path / "approved.json"))
    assert r.returncode == 0, r.stderr
    first = journal(run)[0]
    assert first["plan_sha256"] == json.loads(p.stdout)["plan_sha256"]
    assert first["approved_plan"].endswith("approved.json")
    rep = json.loads((run / "report.json").read_text())
    assert rep["plan_sha256"] == first["plan_sha256"]
    assert rep["plan_vs_actual"]["batch_order_ok"] and not rep["plan_vs_actual"]["nodes"]


def test_report_diffs_skipped_and_added_steps(tmp_path):
    hosts = {"gpu-01": {}, "gpu-02": {"sim_faults": ["cuda_init_fails"]}, "gpu-03": {}}
    inv = write_inventory(tmp_path / "inv", hosts, {"sim_reboot_s": 0.01})
    pb = write_playbook(tmp_path / "pb.yml", serial=[1, 1, 1], min_serving=0, max_fail_percentage=0)
    run = tmp_path / "run"
    assert cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run)).returncode == 1
    diff = json.loads((run / "report.json").read_text())["plan_vs_actual"]
    row = next(d for d in diff["nodes"] if d["node"] == "gpu-02")
    assert row["skipped"] == ["vllm_smoke", "features", "multinode", "uncordon"]
    assert row["added"] == ["rollback x1"]
    assert diff["never_started"] == ["gpu-03"]
    assert [b["status"] for b in diff["batches"]] == ["passed", "failed", "not_started"]
    md = (run / "report.md").read_text()
    assert "| gpu-02 | 2 | vllm_smoke, features, multinode, uncordon | rollback x1 |" in md
    assert result(run)["status"] == "halted"


def test_the_approved_digest_covers_the_inventory_content(tmp_path):
    pb, inv = _setup(tmp_path)
    p = cli("plan", str(pb), "-i", str(inv), "--json")
    (tmp_path / "approved.json").write_text(p.stdout)
    # same hosts, same batches: only a var changes, and in group_vars/, not in the main file
    (inv.parent / "group_vars").mkdir()
    (inv.parent / "group_vars" / "gpu_nodes.yml").write_text(
        "ansible_python_interpreter: \"{{ lookup('pipe', 'id') }}/usr/bin/python3\"\n")
    r = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(tmp_path / "run"),
            "--approved-plan", str(tmp_path / "approved.json"))
    assert r.returncode == 2, r.stderr
    assert "differs from the approved one" in r.stderr and "inventory content" in r.stderr
    assert not (tmp_path / "run" / "journal.jsonl").exists()


@pytest.mark.long
def test_resume_refuses_changed_inputs_unless_told_and_journals_them(tmp_path):
    pb, inv = _setup(tmp_path, serial=1)
    run = tmp_path / "run"
    env = {"K3ROLLOUT_LOCK_DIR": str(tmp_path / "locks")}
    r = cli("run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run), env=env, fault=("KILL", 40))
    assert r.returncode == -9, r.stderr
    before = (run / "journal.jsonl").read_bytes()
    # a host var changes in host_vars/ (the main inventory file is untouched)
    (inv.parent / "host_vars").mkdir()
    (inv.parent / "host_vars" / "gpu-03.yml").write_text("k3_note: changed after approval\n")
    r = cli("resume", str(run), env=env)
    assert r.returncode == 2
    assert "inventory_content_sha256" in r.stderr and "--accept-changed-inputs" in r.stderr
    assert (run / "journal.jsonl").read_bytes() == before            # refused before anything
    # the playbook changes too: named as well
    pb.write_text(pb.read_text().replace("max_fail_percentage: 25", "max_fail_percentage: 50"))
    r = cli("resume", str(run), env=env)
    assert r.returncode == 2 and "playbook_sha256" in r.stderr and str(pb) in r.stderr
    assert (run / "journal.jsonl").read_bytes() == before
    r = cli("resume", str(run), "--accept-changed-inputs", env=env)
    assert r.returncode == 0, r.stderr
    rec = [x for x in journal(run) if x["type"] == "inputs_changed"]
    assert len(rec) == 1 and rec[0]["accepted"] is True
    assert set(rec[0]["changes"]) == {"playbook_sha256", "inventory_content_sha256"}
    assert {n["final"] for n in result(run)["nodes"].values()} == {"upgraded"}
    # once accepted, the changed inputs are the run's inputs: a later resume needs no flag
    assert cli("resume", str(run), env=env).returncode == 0
