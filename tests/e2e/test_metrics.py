"""Prometheus metrics of a run: the endpoint `run --metrics-port` serves while the run goes,
`k3rollout metrics RUN_DIR` (printed, or a textfile for node_exporter), and the report
that is rewritten at each batch's end. Everything is parsed with prometheus_client's own
parser and compared with the journal and result.json."""

from __future__ import annotations

import collections
import os
import re
import socket
import threading
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from support import cli, result, write_inventory, write_playbook
from support.background import Run, approve, setup

# figures that depend on the time they are read at, not on the run's records
MOVING = {"k3rollout_remaining_seconds", "k3rollout_estimated_end_timestamp_seconds"}


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples if s.name not in MOVING}


def value(figures: dict, name: str, **labels: str) -> float:
    return figures[(name, tuple(sorted(labels.items())))]


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        assert r.status == 200
        return r.read().decode()


def test_metrics_endpoint_during_the_run_and_figures_equal_result_json_at_the_end(tmp_path):
    inv = write_inventory(tmp_path / "inv", {"gpu-01": {}, "gpu-02": {"sim_faults": ["cuda_init_fails"]}},
                          {"sim_reboot_s": 0.01})
    pb = write_playbook(tmp_path / "pb.yml", serial=[1], min_serving=0, pauses=[{"after_batch": 1}])
    run_dir = tmp_path / "run"
    run = Run(pb, inv, run_dir, "--metrics-port", "0")
    run.wait_for_pause("after-batch1")
    url = next(m.group(1) for line in run.out if (m := re.match(r"metrics: (http://127\.0\.0\.1:\d+/metrics)", line)))

    # the report written at batch 1's end says the run is in progress, and when it was written
    html = (run_dir / "report.html").read_text()
    assert re.search(r"<h1[^>]*>Run in progress \(this report was written at 20\d\d-", html)

    # the endpoint is fed the engine's records once each is on disk: it shows the pause a moment
    # after the journal does (waited for by what it serves, at most a minute)
    deadline = time.monotonic() + 60
    while value(served := samples(scrape(url)), "k3rollout_pauses_waiting") != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    # the endpoint (fed by the engine's records) and the journal on disk say the same
    assert served == samples(cli("metrics", str(run_dir)).stdout)
    assert value(served, "k3rollout_nodes", state="upgraded") == 1
    assert value(served, "k3rollout_nodes", state="pending") == 1
    assert value(served, "k3rollout_batches_done") == 1 and value(served, "k3rollout_batches_planned") == 2
    assert value(served, "k3rollout_pauses_waiting") == 1
    assert value(served, "k3rollout_run_status", status="running") == 1
    assert value(served, "k3rollout_stage_duration_seconds_count", stage="driver_upgrade",
                 hardware_class="NVIDIA B300 SXM6 AC") == 1

    # scrapers that go away mid-request, and one that never reads its answer
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", int(url.split(":")[2].split("/")[0])), timeout=10)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        s.close()
    s = socket.create_connection(("127.0.0.1", int(url.split(":")[2].split("/")[0])), timeout=10)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()                                     # a reset, as from a killed scraper
    assert samples(scrape(url)) == served

    approve(run_dir, "after-batch1")
    assert run.wait() == 1                        # gpu-02 fails in batch 2: halted
    res = result(run_dir)
    end = samples(cli("metrics", str(run_dir)).stdout)
    finals = collections.Counter(n["final"] for n in res["nodes"].values())
    for state in ("upgraded", "rolled_back", "rollback_failed", "failed", "skipped", "pending"):
        assert value(end, "k3rollout_nodes", state=state) == finals.get(state, 0)
    statuses = collections.Counter(b["status"] for b in res["batches"])
    for status in ("passed", "failed", "rolled_back", "running", "not_started"):
        assert value(end, "k3rollout_batches", status=status) == statuses.get(status, 0)
    assert value(end, "k3rollout_run_status", status=res["status"]) == 1
    failed = [n for n in res["nodes"].values() if n["failed_stage"]]
    assert [(k[1], v) for k, v in end.items() if k[0] == "k3rollout_failures_total"] == \
        [((("category", n["triage"]),), 1) for n in failed]
    assert value(end, "k3rollout_rollbacks_total") == sum(n["rollback"]["attempts"] for n in res["nodes"].values()
                                                          if n["rollback"])
    assert value(end, "k3rollout_rollbacks_total") == 1
    # the report written at the end is the finished one
    assert "Run in progress" not in (run_dir / "report.html").read_text()


def test_textfile_is_replaced_atomically(tmp_path):
    pb, inv, run_dir = setup(tmp_path)
    assert cli("run", str(pb), "-i", str(inv), "--yes", "--plain", "--no-preflight", "--run-dir",
               str(run_dir)).returncode == 0
    out = tmp_path / "textfile"
    out.mkdir()
    prom = out / "k3rollout.prom"
    prom.write_text("# an earlier run's figures\n")
    # held open, so its inode cannot be freed and handed to a later temporary file
    held = open(prom, "rb")
    old_inode = os.fstat(held.fileno()).st_ino
    from k3rollout import cli as k3cli

    done = threading.Event()
    errors: list[BaseException] = []

    def write_again() -> None:
        try:
            for _ in range(15):
                assert k3cli.main(["metrics", str(run_dir), "--textfile", str(prom)]) == 0
        except BaseException as exc:     # noqa: BLE001 - handed to the test's thread
            errors.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=write_again)
    t.start()
    reads = 0
    while not done.is_set() or reads == 0:
        text = prom.read_text()
        if text.startswith("# an earlier"):
            continue
        reads += 1
        # whole every time it is read: every family, ending with the last one's line
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"k3rollout_nodes", "k3rollout_journal_records"} <= names and text.endswith("\n")
    t.join()
    assert not errors, errors
    # renamed over, never written in place: the file held open still has the old bytes and no name
    assert prom.stat().st_ino != old_inode and os.fstat(held.fileno()).st_nlink == 0
    assert held.read() == b"# an earlier run's figures\n"
    held.close()
    assert os.listdir(out) == ["k3rollout.prom"]  # no temporary file left beside it
    figures = samples(prom.read_text())
    assert value(figures, "k3rollout_nodes", state="upgraded") == 2
    assert value(figures, "k3rollout_run_status", status="completed") == 1
    # and printed: the same figures
    assert samples(cli("metrics", str(run_dir)).stdout) == figures
    bad = cli("metrics", str(run_dir), "--textfile", str(tmp_path / "no-such-dir" / "k3rollout.prom"))
    assert bad.returncode == 2 and "cannot write the textfile" in bad.stderr


def test_metrics_port_in_use_is_refused_before_anything_changes(tmp_path):
    pb, inv, run_dir = setup(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = cli("run", str(pb), "-i", str(inv), "--yes", "--plain", "--no-preflight", "--run-dir", str(run_dir),
                "--metrics-port", str(port))
    assert p.returncode == 2 and f"--metrics-port {port}" in p.stderr
    assert not (run_dir / "journal.jsonl").exists() or (run_dir / "journal.jsonl").stat().st_size == 0
