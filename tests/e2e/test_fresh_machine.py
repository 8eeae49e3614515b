"""k3rollout as a user installs it: its own tools found without an activated venv, a wheel
install run from another folder, a pipe that closes early, and the suite's no-skip rule."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support import PLAYBOOK, ROOT, SIM_INVENTORY, write_playbook

from k3rollout.cli import main

BARE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def test_own_tools_are_found_beside_the_interpreter_with_a_bare_path(monkeypatch):
    from k3rollout.toolpaths import find_tool

    monkeypatch.setenv("PATH", BARE_PATH)
    found = find_tool("ansible-playbook")
    assert found == str(Path(sys.executable).parent / "ansible-playbook")
    assert find_tool("ansible-inventory") == str(Path(sys.executable).parent / "ansible-inventory")
    assert find_tool("sh") == "/usr/bin/sh" or find_tool("sh") == "/bin/sh"     # then PATH
    assert find_tool("k3rollout-no-such-tool") is None


def _ssh_inventory(tmp_path: Path) -> Path:
    # two B300 nodes, one Kimi K3 replica each: the shipped play's replica plan reads the GPUs here
    inv = tmp_path / "inv.yml"
    inv.write_text(textwrap.dedent("""\
        all:
          vars: {ansible_connection: ssh, ansible_user: root, ansible_ssh_private_key_file: /nonexistent/key,
                 k3_gpu_model: NVIDIA B300 SXM6 AC, k3_gpu_count: 8, k3_gpu_mem_gib: 268}
          children:
            gpu_nodes:
              hosts:
                gpu-01: {ansible_host: 127.0.0.1, ansible_port: 1}
                gpu-02: {ansible_host: 127.0.0.1, ansible_port: 1}
        """))
    return inv


@pytest.mark.parametrize("verb", ["validate", "plan", "run"])
def test_a_missing_ansible_playbook_is_refused_before_any_node_is_touched(verb, tmp_path, monkeypatch, capsys):
    """Over SSH the driver stage runs the vendor task files with ansible-playbook. Without
    one on the controller, the verb says so once and exits 2; no run directory, no journal,
    nothing rolled back (the hosts here would not even answer)."""
    from k3rollout import toolpaths

    monkeypatch.setattr(toolpaths, "_own_dirs", lambda: [tmp_path / "empty-bin"])
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    inv = _ssh_inventory(tmp_path)
    run_dir = tmp_path / "run"
    argv = [verb, str(PLAYBOOK), "-i", str(inv)] + (["--yes", "--run-dir", str(run_dir)] if verb == "run" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("ansible-playbook") >= 1 and "nothing was changed" in err, err
    assert "driver-apt.yml" in err
    assert not (run_dir / "journal.jsonl").exists()


def test_the_sim_transport_needs_no_ansible(tmp_path, monkeypatch):
    from k3rollout import toolpaths

    monkeypatch.setattr(toolpaths, "_own_dirs", lambda: [tmp_path / "empty-bin"])
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    assert main(["validate", str(PLAYBOOK), "-i", str(SIM_INVENTORY)]) == 0


@pytest.mark.long
def test_ssh_rollout_with_a_bare_path_and_no_activated_venv(sshd_cluster, tmp_path):
    """The README's way: `.venv/bin/k3rollout` run with PATH holding only the system dirs.
    The vendor steps run through ansible-runner and the venv's own ansible-playbook."""
    with sshd_cluster({"gpu-01": {}, "gpu-02": {}}) as c:
        inv = c.inventory(tmp_path / "inv" / "hosts.yml")
        pb = write_playbook(tmp_path / "pb.yml", serial=2, min_serving=0, reboot_timeout=30)
        run_dir = tmp_path / "run"
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
        env["PATH"] = BARE_PATH
        p = subprocess.run([sys.executable, "-m", "k3rollout", "run", str(pb), "-i", str(inv), "--yes", "--plain",
                            "--run-dir", str(run_dir)], env=env, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        r = json.loads((run_dir / "result.json").read_text())
        assert {n["final"] for n in r["nodes"].values()} == {"upgraded"}
        recs = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines()]
        tasks = {x.get("task") for x in recs if x["type"] == "ansible_event" and x.get("event") == "runner_on_ok"}
        assert "Install the pinned NVIDIA driver packages" in tasks


def test_plan_into_a_pipe_that_closes_early_exits_quietly(tmp_path):
    sh = (f"{sys.executable} -m k3rollout plan {PLAYBOOK} -i {SIM_INVENTORY} --rollback | head -3 >/dev/null; "
          "echo \"rc=${PIPESTATUS[0]}\"")
    p = subprocess.run(["bash", "-c", sh], capture_output=True, text=True, timeout=120)
    rc = int(p.stdout.strip().split("=")[1])
    assert rc in (0, 141), p.stdout + p.stderr
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr, p.stderr


@pytest.mark.long
def test_a_wheel_installed_k3rollout_runs_its_demo_from_another_folder(tmp_path):
    """`pip install .` (a wheel, not editable) into a fresh venv, then `k3rollout demo` from an
    unrelated folder: the default playbook, sim inventory and runbooks come with the package,
    and the report's runbook links point at files that exist. The wheel is built and
    installed without its dependencies, which the fresh venv borrows from this one through
    a .pth line (what is under test is the package, not pip's resolver)."""
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels), str(ROOT)], check=True, capture_output=True, timeout=300)
    (whl,) = wheels.glob("k3rollout-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    here = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    (site / "zz-borrowed-deps.pth").write_text(here + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(whl)],
                   check=True, capture_output=True, timeout=300)
    # the console script pip writes under --target's bin/ (not the venv's) is plain; make
    # the venv's own from the wheel's entry point
    exe = venv / "bin" / "k3rollout"
    exe.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom k3rollout.cli import entrypoint\n"
                   "sys.exit(entrypoint())\n")
    exe.chmod(0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = BARE_PATH
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import k3rollout; print(k3rollout.__file__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(site)), where.stdout      # the wheel's copy, not the checkout
    p = subprocess.run([str(exe), "demo", "--plain", "--run-dir", "demo-run"], cwd=elsewhere, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    run_dir = elsewhere / "demo-run"
    html = (run_dir / "report.html").read_text()
    links = [x.split('"')[0] for x in html.split('href="file://')[1:]]
    assert links, "the report links its runbooks"
    for link in links:
        assert Path(link).is_file(), link
        assert link.startswith(str(site)), link
    r = json.loads((run_dir / "result.json").read_text())
    assert len(r["nodes"]) >= 2
    # the runbooks' own links (the docs/ pages with the reasons, each other) resolve in the package
    books = Path(links[0]).parent
    relative = [(book.name, target) for book in books.glob("*.md")
                for target in re.findall(r"\]\(([^)#:\s]+\.md)(?:#[^)]*)?\)", book.read_text())]
    assert any(t.startswith("../docs/") for _, t in relative), relative
    for name, target in relative:
        assert (books / target).is_file(), (name, target)


@pytest.mark.long
def test_under_ci_a_skip_is_a_failure(pytester, monkeypatch):
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text().split("@pytest.fixture(autouse=True")[0])
    pytester.makepyfile(test_x="""
        import pytest
        def test_needs_a_tool():
            pytest.skip("tool missing")
        """, test_y="""
        import pytest
        nope = pytest.importorskip("k3rollout_no_such_module")
        def test_never():
            pass
        """)
    monkeypatch.setenv("CI", "true")
    res = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "--continue-on-collection-errors")
    res.assert_outcomes(failed=1, errors=1)
    monkeypatch.setenv("CI", "false")
    res = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "--continue-on-collection-errors")
    res.assert_outcomes(skipped=2)


def test_slurm_over_ssh_without_scontrol_on_the_controller_is_refused_before_any_node(tmp_path, monkeypatch, capsys):
    from k3rollout.transport import local

    monkeypatch.setattr(local, "resolve", lambda program: None)
    inv = _ssh_inventory(tmp_path)
    inv.write_text(inv.read_text().replace("ansible_connection: ssh,", "ansible_connection: ssh, scheduler: slurm,"))
    assert main(["validate", str(PLAYBOOK), "-i", str(inv)]) == 2
    err = capsys.readouterr().err
    assert "`scontrol` is needed on the controller" in err and "gpu-01, gpu-02" in err, err
