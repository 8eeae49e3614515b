"""The HTML reports render in a real headless Chromium: non-blank, key elements present."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from support import PLAYBOOK, write_inventory, write_playbook

from k3rollout.cli import main

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium missing: scripts/test.sh installs it")
        pytest.skip("chromium not installed")
    return exe


def browse(exe: str, page: Path, tmp: Path) -> tuple[str, Path]:
    profile = tmp / "profile"
    shot = tmp / f"{page.stem}.png"
    base = [exe, *FLAGS, f"--user-data-dir={profile}"]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot_run = subprocess.run([*base, f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri()],
                              capture_output=True, text=True, timeout=120)
    assert shot_run.returncode == 0 and shot.exists(), shot_run.stderr[-2000:]
    return dom.stdout, shot


def png_pixels(path: Path) -> bytes:
    """The raw (filtered) scanline bytes of a PNG: enough to tell a blank page from a page."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return zlib.decompress(idat)


def assert_rendered(dom: str, shot: Path, *ids: str) -> None:
    for i in ids:
        assert f'id="{i}"' in dom, i
    raw = png_pixels(shot)
    assert len(set(raw)) > 30, "the screenshot is blank"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    os.environ["K3ROLLOUT_LOCK_DIR"] = str(base / "locks")
    out = {}
    # containerd nodes; gpu-01 serves through a Deployment: the report shows its pod and owner
    inv = write_inventory(base / "inv-ok", {"gpu-01": {"sim_k8s_serving": {"kind": "Deployment", "name": "k3-gpu-01"}},
                                            "gpu-02": {"sim_faults": ["vllm_oom"]}, "gpu-03": {}})
    pb = write_playbook(base / "pb.yml", serial=[1, 2], min_serving=0, max_fail_percentage=50)
    main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(base / "completed")])
    main(["observe", str(base / "completed"), "--once"])       # after the window: its report gains a section
    out["completed"] = base / "completed"
    inv = write_inventory(base / "inv-bad", {"gpu-01": {"sim_faults": ["driver_install_fails"]}, "gpu-02": {}})
    main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(base / "halted")])
    out["halted"] = base / "halted"
    inv = write_inventory(base / "inv-rb", {"gpu-01": {}})
    main(["run", str(write_playbook(base / "pb1.yml", min_serving=0)), "-i", str(inv), "--yes", "--run-dir",
          str(base / "rolled_back")])
    main(["rollback", str(base / "rolled_back")])
    out["rolled_back"] = base / "rolled_back"
    return out


@pytest.mark.parametrize("kind,verdict", [("completed", "Rollout completed"), ("halted", "Rollout HALTED"),
                                          ("rolled_back", "Rollout completed")])
def test_report_renders_in_chromium(chromium, runs, tmp_path, kind, verdict):
    dom, shot = browse(chromium, runs[kind] / "report.html", tmp_path)
    assert_rendered(dom, shot, "verdict", "timeline-svg", "batches", "plan-diff", "nodes", "gates", "checklist",
                    "triage")
    assert verdict in dom
    if kind == "halted":
        assert 'id="halt"' in dom and "driver_install_fails" not in dom and "driver_upgrade" in dom
        assert "planned stages not run" in dom          # the plan-vs-actual table lists the failed node
    if kind == "rolled_back":
        assert "rolled_back" in dom and "rollback ran" in dom
    if kind == "completed":
        assert "model_load_capacity" in dom       # gpu-02's OOM, triaged
        assert_rendered(dom, shot, "observation", "serving-pods")
        assert "Deployment inference/k3-gpu-01" in dom and "1 \u2192 1" in dom      # &rarr; as the DOM has it
        assert "Decision: <strong>KEEP</strong>" in dom and "k3rollout rollback" in dom
    else:
        assert 'id="observation"' not in dom      # never observed: no section


def test_plan_report_renders_in_chromium(chromium, tmp_path):
    out = tmp_path / "plan.html"
    # the shipped play plans Kimi K3 replicas: 8 H200 nodes of one rack make 4 two-node replicas
    h200 = {"k3_gpu_model": "NVIDIA H200", "k3_gpu_count": 8, "k3_gpu_mem_gib": 141, "rack": "a"}
    inv = write_inventory(tmp_path / "inv", {f"gpu-{i:02d}": dict(h200) for i in range(1, 9)})
    assert main(["plan", str(PLAYBOOK), "-i", str(inv), "--window", "4h", "--format", "html", "--output",
                 str(out)]) == 0
    dom, shot = browse(chromium, out, tmp_path)
    assert_rendered(dom, shot, "verdict", "stages", "batches")
    assert "does NOT fit" in dom
    assert "tp16-ep16" in dom and "rack-a/4" in dom
