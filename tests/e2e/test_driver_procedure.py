"""The vendor's driver procedure on each vendor path: parsers on real output, the simulated
repositories, and rollouts (inline steps on the sim; Ansible task files over real sshd in
test_ssh-style clusters) that upgrade and roll back exactly."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from support import DATA, PLAYBOOK, commands, journal, result, sim_state, write_inventory

from k3rollout.checks import driver_facts as df
from k3rollout.checks import parsers
from k3rollout.cli import main
from k3sim.dispatch import dispatch, init_cluster
from k3sim.state import default_state

P = DATA / "parsers"
SHORT = ("baseline", "cordon", "driver_upgrade", "cuda_check", "uncordon")


def short_playbook(path: Path, **with_) -> Path:
    """The shipped playbook, only the stages the driver procedure needs (fast)."""
    data = yaml.safe_load(PLAYBOOK.read_text())
    play = data[0]
    play.pop("profile", None)           # single-node test clusters: plan in nodes, not K3 replicas
    play["stages"] = [s for s in play["stages"] if s["stage"] in SHORT]
    play["min_serving"] = 0
    play["max_fail_percentage"] = 100
    play["serial"] = 4
    up = next(s for s in play["stages"] if s["stage"] == "driver_upgrade")
    up["with"]["tasks"] = {k: str(PLAYBOOK.parent / v) for k, v in up["with"]["tasks"].items()}
    up["with"].update(with_)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def go(tmp_path: Path, hosts: dict, playbook: Path | None = None, *extra: str) -> tuple[int, Path]:
    inv = write_inventory(tmp_path / "inv", hosts)
    run_dir = tmp_path / "run"
    pb = playbook or short_playbook(tmp_path / "pb.yml")
    code = main(["run", str(pb), "-i", str(inv), "--yes", "--run-dir", str(run_dir), *extra])
    return code, run_dir


# ---------------------------------------------------------------- parsers on real output


def test_apt_madison_versions_and_sources():
    m = parsers.parse_apt_madison((P / "apt-cache-madison-jammy.txt").read_text())
    assert [o["version"] for o in m["nvidia-driver-580-server-open"]] == ["580.95.05-0ubuntu0.22.04.2"] * 2
    assert m["libnvidia-compute-515-server"][0]["source"].endswith("jammy-updates/restricted amd64 Packages")
    assert "nvidia-graphics-drivers-580-server" not in m           # a deb-src line is not installable
    pins, missing = df.resolve(["nvidia-driver-580-server-open", "nvidia-utils-580-server"], "580.95.05", m)
    assert pins == {"nvidia-driver-580-server-open": "580.95.05-0ubuntu0.22.04.2"}
    assert missing == ["nvidia-utils-580-server"]
    assert df.resolve(["nvidia-driver-580-server-open"], "580.82.07", m)[1] == ["nvidia-driver-580-server-open"]


def test_apt_policy_installed_candidate_and_origin():
    pol = parsers.parse_apt_policy((P / "apt-cache-policy-cuda-repo.txt").read_text())
    d = pol["nvidia-driver"]
    assert (d["installed"], d["candidate"]) == ("555.42.06-1", "555.42.06-1")
    assert d["origin"] == "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64  Packages"
    assert [v["version"] for v in d["versions"]][:2] == ["560.28.03-1", "555.42.06-1"]
    assert [v["installed"] for v in d["versions"]][:2] == [False, True]
    fm = pol["cuda-drivers-fabricmanager"]
    assert fm["installed"] is None and fm["origin"] is None and fm["candidate"] == "550.54.14-1"


def test_dnf_list_sections_epoch_and_wrapped_rows():
    rows = parsers.parse_dnf_list((P / "dnf-list-showduplicates-fabric-manager.txt").read_text())
    fm = rows["nvidia-fabric-manager"]
    assert [(r["version"], r["installed"], r["repo"]) for r in fm] == [
        ("495.29.05-1", True, "cuda-rhel8-x86_64"), ("495.29.05-1", False, "cuda-rhel8-x86_64"),
        ("470.82.01-1", False, "cuda-rhel8-x86_64")]
    assert rows["kmod-nvidia-open-dkms"][0]["evr"] == "3:580.95.05-1.el9"
    assert rows["nvidia-driver-cuda-libs"][0]["version"] == "580.95.05-1.el9"      # joined from two lines
    assert df.pin("dnf", "kmod-nvidia-open-dkms", "3:580.95.05-1.el9") == "kmod-nvidia-open-dkms-580.95.05-1.el9"


def test_dnf_module_list_flags():
    mods = parsers.parse_dnf_module_list((P / "dnf-module-list-nvidia-driver.txt").read_text())
    by = {m["stream"]: m for m in mods}
    assert by["open-dkms"]["default"] and not by["open-dkms"]["enabled"]
    assert by["575-open"]["enabled"] and by["575-open"]["installed"]
    assert parsers.enabled_stream(mods) == "575-open"
    assert parsers.enabled_stream([m for m in mods if m["stream"] != "575-open"]) is None


def test_mokutil_showhold_and_params():
    assert parsers.parse_mokutil_sb_state((P / "mokutil-sb-state-enabled.txt").read_text()) is True
    assert parsers.parse_mokutil_sb_state("SecureBoot disabled\n") is False
    assert parsers.parse_mokutil_sb_state("EFI variables are not supported on this system\n") is False
    assert parsers.parse_mokutil_sb_state("mokutil: command not found\n") is None
    assert parsers.parse_apt_showhold((P / "apt-mark-showhold.txt").read_text()) == [
        "nvidia-driver-575-server-open", "nvidia-fabricmanager-575"]
    params = parsers.parse_nvidia_params((P / "proc-driver-nvidia-params.txt").read_text())
    assert params["RegistryDwords"] == "RMIntrLockingMode=1" and params["EnableResizableBar"] == "1"
    assert params["RmMsg"] == ""


def test_versionlock_list_entries():
    # `dnf versionlock list` prints the lock list's entries as `dnf versionlock add` wrote them
    # (dnf-plugins-core plugins/versionlock.py: pkgtup2spec "name-epoch:version-release.*"),
    # after dnf's metadata line; "!" entries exclude a version instead of locking one
    text = ("Last metadata expiration check: 0:12:04 ago on Thu 03 Dec 2026 02:11:54 AM UTC.\n"
            "nvidia-driver-3:575.57.08-1.el9.*\nnvidia-fabric-manager-0:575.57.08-1.*\n"
            "!kernel-0:5.14.0-570.el9.*\nbash-4.4.20-1.el8_4.*\n")
    got = parsers.parse_versionlock_list(text)
    assert [(e["name"], e["version"], e["exclude"]) for e in got] == [
        ("nvidia-driver", "575.57.08-1.el9", False), ("nvidia-fabric-manager", "575.57.08-1", False),
        ("kernel", "5.14.0-570.el9", True), ("bash", "4.4.20-1.el8_4", False)]


# ---------------------------------------------------------------- the simulated repositories


def sh(d, *argv):
    return dispatch(d, list(argv))


@pytest.fixture
def node(tmp_path):
    count = iter(range(100))

    def make(**hv):
        # a Docker host: these tests run the node's own containers with the docker CLI
        name = f"n{next(count)}"
        return init_cluster(tmp_path / "hosts", {name: {"sim_container_runtime": "docker", **hv}})[name]
    return make


def test_updates_pocket_drops_superseded_versions(node):
    d = node()
    m = parsers.parse_apt_madison(sh(d, "apt-cache", "madison", "nvidia-driver-575-server-open").stdout)
    assert [o["version"] for o in m["nvidia-driver-575-server-open"]] == ["575.57.08-0ubuntu0.22.04.1"]
    gone = node(sim_faults=["rollback_packages_gone"], sim_os_version="24.04")
    # noble: its own version strings; a newer 575 upload replaced the one installed
    m = parsers.parse_apt_madison(sh(gone, "apt-cache", "madison", "nvidia-driver-575-server-open").stdout)
    assert [o["version"] for o in m["nvidia-driver-575-server-open"]] == ["575.64.05-0ubuntu0.24.04.1"]
    pol = parsers.parse_apt_policy(sh(gone, "apt-cache", "policy", "nvidia-driver-575-server-open").stdout)
    assert pol["nvidia-driver-575-server-open"]["installed"] == "575.57.08-0ubuntu0.24.04.1"
    assert pol["nvidia-driver-575-server-open"]["origin"] is None        # only /var/lib/dpkg/status has it
    r = sh(gone, "apt-get", "install", "-y", "nvidia-driver-575-server-open=575.57.08-0ubuntu0.24.04.1")
    assert r.rc == 100 and "E: Version '575.57.08-0ubuntu0.24.04.1' for 'nvidia-driver-575-server-open' was not " \
                              "found" in r.stderr
    # -0ubuntu1 is not an archive version on an LTS release
    r = sh(d, "apt-get", "install", "-y", "nvidia-driver-580-server-open=580.95.05-0ubuntu1")
    assert r.rc == 100 and "was not found" in r.stderr


def test_dnf_module_streams_filter_installs_until_switched(node):
    d = node(ansible_os_family="RedHat")
    assert parsers.enabled_stream(parsers.parse_dnf_module_list(sh(d, "dnf", "module", "list", "nvidia-driver").stdout)) \
        == "575-open"
    r = sh(d, "dnf", "install", "-y", "nvidia-driver-580.95.05-1.el9")
    assert r.rc == 1 and "filtered out by modular filtering" in r.stderr
    r = sh(d, "dnf", "-y", "module", "enable", "nvidia-driver:580-open")
    assert r.rc == 1 and "It is not possible to switch enabled streams" in r.stderr
    assert sh(d, "dnf", "-y", "module", "reset", "nvidia-driver").rc == 0
    assert sh(d, "dnf", "-y", "module", "enable", "nvidia-driver:580-open").rc == 0
    rows = parsers.parse_dnf_list(sh(d, "dnf", "list", "--showduplicates", "nvidia-driver").stdout)
    assert {r["version"] for r in rows["nvidia-driver"] if not r["installed"]} == {
        "580.65.06-1.el9", "580.82.07-1.el9", "580.95.05-1.el9"}
    r = sh(d, "dnf", "install", "-y", "nvidia-driver-580.95.05-1.el9", "nvidia-fabricmanager-580.95.05-1",
           "kernel-devel-matched-5.14.0-503.el9", "kernel-headers-5.14.0-503.el9")
    assert r.rc == 0, r.stderr
    pk = {p["name"]: p["version"] for p in parsers.parse_packages(sh(d, *parsers.RPM_ARGV).stdout)}
    # from 580 the RPM is nvidia-fabricmanager; the 575 nvidia-fabric-manager is gone
    assert pk["nvidia-fabricmanager"] == "580.95.05-1" and "nvidia-fabric-manager" not in pk
    assert pk["nvidia-driver"] == "580.95.05-1.el9" and pk["libnvidia-container1"] == "1.17.8-1"


def test_dnf_versionlock_as_the_plugin_does_it(node):
    plain = node(ansible_os_family="RedHat")
    r = sh(plain, "dnf", "versionlock", "list")
    assert r.rc == 1 and "No such command: versionlock" in r.stderr      # the plugin is not installed
    d = node(ansible_os_family="RedHat", sim_held_packages=["nvidia-driver"])
    assert sh(d, "dnf", "versionlock", "list").stdout.splitlines()[1:] == ["nvidia-driver-3:575.57.08-1.el9.*"]
    sh(d, "dnf", "-y", "module", "reset", "nvidia-driver")
    sh(d, "dnf", "-y", "module", "enable", "nvidia-driver:580-open")
    # every other version of a locked name is hidden from the install
    r = sh(d, "dnf", "install", "-y", "nvidia-driver-580.95.05-1.el9")
    assert r.rc == 1 and "filtered out by exclude filtering for argument: nvidia-driver-580.95.05-1.el9" in r.stderr
    r = sh(d, "dnf", "versionlock", "delete", "nvidia-driver")
    assert r.stdout.endswith("Deleting versionlock for: nvidia-driver-3:575.57.08-1.el9.*\n")
    assert sh(d, "dnf", "install", "-y", "nvidia-driver-580.95.05-1.el9", "nvidia-fabricmanager-580.95.05-1",
              "kernel-devel-matched-5.14.0-503.el9", "kernel-headers-5.14.0-503.el9").rc == 0
    r = sh(d, "dnf", "versionlock", "add", "nvidia-driver", "nvidia-fabricmanager", "nope")
    assert r.stdout.splitlines()[1:] == ["Adding versionlock on: nvidia-driver-3:580.95.05-1.el9.*",
                                         "Adding versionlock on: nvidia-fabricmanager-0:580.95.05-1.*",
                                         "No package found for: nope"]
    assert "already locked in equivalent form" in sh(d, "dnf", "versionlock", "add", "nvidia-driver").stdout


def test_a_precompiled_node_without_its_module_package_has_no_kernel_module(node):
    # Canonical's precompiled module is the only kernel module on that path: the driver's
    # user space without linux-modules-nvidia-575-server-open-$(uname -r) loads nothing
    d = node(nvidia_driver_source="ubuntu-archive-precompiled")
    pins = [f"{n}=575.57.08-0ubuntu0.22.04.1" for n in df.driver_packages("ubuntu-archive-precompiled", 575)]
    sh(d, "apt-get", "install", "-y", *[f"{n}=580.95.05-0ubuntu0.22.04.1" for n in
                                        df.target_names("ubuntu-archive-precompiled", 580, "6.8.0-45-generic", True)],
       "linux-modules-nvidia-580-server-open-6.8.0-45-generic=6.8.0-45.45+1")
    assert sh(d, "modinfo", "-F", "version", "nvidia").stdout == "580.95.05\n"
    assert sh(d, "apt-get", "install", "-y", "--allow-downgrades", *pins).rc == 0
    assert sh(d, "modinfo", "-F", "version", "nvidia").rc == 1
    assert sh(d, "apt-get", "install", "-y", "--allow-downgrades", *pins,
              "linux-modules-nvidia-575-server-open-6.8.0-45-generic=6.8.0-45.45+1").rc == 0
    assert sh(d, "modinfo", "-F", "version", "nvidia").stdout == "575.57.08\n"


def test_fabric_manager_must_match_the_driver(node):
    d = node(nvidia_driver_source="cuda-repo")
    r = sh(d, "apt-get", "install", "-y", "nvidia-driver-580-open=580.95.05-0ubuntu1",
           "nvidia-kernel-common-580=580.95.05-0ubuntu1", "nvidia-fabricmanager=580.82.07-1")
    assert r.rc == 100 and "nvidia-fabricmanager : Depends: nvidia-kernel-common-580 (= 580.82.07-1)" in r.stderr
    # one installed from elsewhere at another version: it does not start, CUDA says 802
    m = node(sim_fabricmanager_version="575.51.03", driver_version="575.57.08")
    assert sh(m, "systemctl", "is-active", "nvidia-fabricmanager").stdout == "failed\n"
    log = sh(m, "journalctl", "-u", "nvidia-fabricmanager").stdout
    assert ("fabric manager NVIDIA GPU driver interface version 575.51.03 don't match with driver version "
            "575.57.08. Please update with matching NVIDIA driver package.") in log
    r = sh(m, "docker", "run", "--rm", "--gpus", "all", "--entrypoint", "python3", "vllm/vllm-openai:v0.11.0",
           "-c", "import torch; torch.cuda.init()")
    assert r.rc == 1 and "error 802" in r.stderr


def test_gpu_services_hold_the_module_until_stopped(node):
    d = node()
    sh(d, "docker", "stop", "vllm-serving")
    r = sh(d, "modprobe", "-r", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia")
    assert r.rc == 1 and "Module nvidia is in use" in r.stderr
    assert sh(d, "systemctl", "disable", "--now", "nvidia-fabricmanager", "nvidia-persistenced", "nvidia-dcgm").rc == 0
    assert sh(d, "modprobe", "-r", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia").rc == 0
    assert sh(d, "nvidia-smi").rc == 9


def test_the_module_reads_its_modprobe_options_when_it_loads(node):
    d = node()
    def params():
        return parsers.parse_nvidia_params(sh(d, "cat", "/proc/driver/nvidia/params").stdout)
    assert params()["EnableStreamMemOPs"] == "0"            # a fresh driver's default
    w = dispatch(d, ["tee", "/etc/modprobe.d/nvidia-k3.conf"], b"options nvidia NVreg_EnableStreamMemOPs=1\n")
    assert (w.rc, w.stdout) == (0, "options nvidia NVreg_EnableStreamMemOPs=1\n")
    assert sh(d, "cat", "/etc/modprobe.d/nvidia-k3.conf").stdout == "options nvidia NVreg_EnableStreamMemOPs=1\n"
    assert "nvidia-k3.conf" in sh(d, "ls", "/etc/modprobe.d").stdout.split()
    assert params()["EnableStreamMemOPs"] == "0"            # the loaded module read its options already
    sh(d, "reboot")
    time.sleep(0.1)
    assert params()["EnableStreamMemOPs"] == "1"


def test_secure_boot_rejects_an_unsigned_dkms_module(node):
    d = node(sim_secure_boot=True)
    assert sh(d, "mokutil", "--sb-state").stdout == "SecureBoot enabled\n"
    assert "is not enrolled" in sh(d, "mokutil", "--test-key", df.MOK_KEY).stdout
    pins = ["linux-headers-6.8.0-45-generic=6.8.0-45.45"] + \
        [f"{n}=580.95.05-0ubuntu0.22.04.1" for n in df.target_names("ubuntu-archive", 580, "", True)]
    assert sh(d, "apt-get", "install", "-y", *pins).rc == 0
    assert sh(d, "modinfo", "-F", "signer", "nvidia").stdout == "\n"
    sh(d, "reboot")
    time.sleep(0.1)
    assert sh(d, "nvidia-smi").rc == 9
    assert "Key was rejected by service" in sh(d, "modprobe", "nvidia").stderr


# ---------------------------------------------------------------- rollouts on each vendor path


def installed(run_dir: Path, host: str) -> dict[str, str]:
    return {n: v for n, v in sim_state(run_dir, host)["packages"].items()}


def test_each_vendor_path_upgrades_with_resolved_versions_and_restores_services(tmp_path):
    # arch carries a DeepEP site's nvidia module options in modprobe.d (a fresh driver sets none):
    # the baseline records them and the reinstall keeps them
    hosts = {"arch": {"sim_held_packages": ["nvidia-driver-575-server-open"], "sim_device_plugin": True,
                      "sim_nvidia_module_options": 'NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"'},
             "pre": {"nvidia_driver_source": "ubuntu-archive-precompiled", "sim_secure_boot": True,
                     "sim_os_version": "24.04"},
             "cuda": {"nvidia_driver_source": "cuda-repo"},
             "rhel": {"ansible_os_family": "RedHat", "sim_held_packages": ["nvidia-driver"]}}
    code, run_dir = go(tmp_path, hosts)
    r = result(run_dir)
    assert code == 0, r
    assert {n: v["final"] for n, v in r["nodes"].items()} == dict.fromkeys(hosts, "upgraded")
    a, p, c, h = (installed(run_dir, n) for n in hosts)
    assert a["nvidia-driver-580-server-open"] == "580.95.05-0ubuntu0.22.04.1"
    assert a["nvidia-fabricmanager-580"] == "580.95.05-0ubuntu0.22.04.1" and "nvidia-driver-575-server-open" not in a
    assert p["linux-modules-nvidia-580-server-open-6.8.0-45-generic"] and "nvidia-dkms-580-server-open" not in p
    assert c["nvidia-driver-580-open"] == "580.95.05-0ubuntu1" and c["nvidia-fabricmanager"] == "580.95.05-1"
    assert h["nvidia-driver"] == "580.95.05-1.el9" and h["nvidia-fabricmanager"] == "580.95.05-1"
    assert sim_state(run_dir, "rhel")["module_stream"] == "580-open"
    # Secure Boot with Canonical's signed precompiled module: it loaded
    assert sim_state(run_dir, "pre")["loaded_driver"] == "580.95.05"
    for n in hosts:
        st = sim_state(run_dir, n)
        assert {u: s["active"] for u, s in st["services"].items()} == {
            "nvidia-fabricmanager": True, "nvidia-persistenced": True, "nvidia-dcgm": True,
            **({"nvidia-device-plugin": True} if n == "arch" else {})}, n
    # the hold was released for the upgrade, recorded, and put back on the new packages
    assert "nvidia-driver-580-server-open" in sim_state(run_dir, "arch")["holds"]
    facts = {(x["node"], x["stage"]): x["facts"] for x in journal(run_dir) if x["type"] == "facts"}
    assert facts[("arch", "baseline")]["held_packages"] == ["nvidia-driver-575-server-open"]
    assert facts[("arch", "driver_upgrade")]["held_packages"] == ["nvidia-driver-575-server-open"]
    # RHEL: the DNF version lock likewise, by name, and on the new version after the upgrade
    assert facts[("rhel", "baseline")]["held_packages"] == ["nvidia-driver"]
    assert facts[("rhel", "driver_upgrade")]["held_packages"] == ["nvidia-driver"]
    locks = sim_state(run_dir, "rhel")["version_locks"]
    assert "nvidia-driver-3:580.95.05-1.el9.*" in locks and not any("575" in e for e in locks)
    rcmds = commands(run_dir, "rhel")
    assert rcmds.index("dnf versionlock delete nvidia-driver") < rcmds.index("dnf -y module reset nvidia-driver")
    # the device plugin on the host holds the GPU like DCGM: stopped before, started last
    acmds = commands(run_dir, "arch")
    stop = "systemctl disable --now nvidia-fabricmanager nvidia-persistenced nvidia-dcgm nvidia-device-plugin"
    assert acmds.index(stop) < acmds.index(next(x for x in acmds if x.startswith("apt-get install")))
    restarts = [x for x in acmds if x.startswith("systemctl enable --now")]
    assert restarts[-1] == "systemctl enable --now nvidia-device-plugin"
    assert facts[("rhel", "baseline")]["driver_module_stream"] == "575-open"
    assert facts[("pre", "baseline")]["secure_boot"] is True
    assert any("NVreg_EnableStreamMemOPs=1" in m["line"] for m in facts[("arch", "baseline")]["modprobe_d"])
    assert facts[("arch", "driver_upgrade")]["nvidia_params"]["EnableStreamMemOPs"] == "1"
    assert facts[("cuda", "driver_upgrade")]["nvidia_params"]["EnableStreamMemOPs"] == "0"     # the driver's default
    pk = {p["name"]: p for p in facts[("cuda", "baseline")]["driver_packages"]}
    assert pk["libnvidia-compute-575"]["version"] == "575.57.08-0ubuntu1"
    assert "developer.download.nvidia.com/compute/cuda/repos/ubuntu2204" in pk["libnvidia-compute-575"]["origin"]
    assert "nvidia-container-toolkit" in pk
    # every package pinned to what the node's repositories offered, headers in the same transaction
    cmds = commands(run_dir, "arch")
    install = [x for x in cmds if x.startswith("apt-get install")]
    assert len(install) == 1 and "linux-headers-6.8.0-45-generic=6.8.0-45.45" in install[0]
    assert any(x.startswith("apt-cache madison") for x in cmds)
    assert cmds.index("apt-mark unhold nvidia-driver-575-server-open") < cmds.index(install[0])
    assert any(x.startswith("dnf -y module reset nvidia-driver") for x in commands(run_dir, "rhel"))


def test_rollback_restores_every_package_exactly_on_each_path(tmp_path):
    hosts = {n: {"sim_faults": ["cuda_init_fails"], **hv} for n, hv in
             {"arch": {"sim_held_packages": ["nvidia-driver-575-server-open"], "sim_device_plugin": True},
              "cuda": {"nvidia_driver_source": "cuda-repo"},
              "pre": {"nvidia_driver_source": "ubuntu-archive-precompiled", "sim_secure_boot": True},
              "rhel": {"ansible_os_family": "RedHat", "sim_held_packages": ["nvidia-driver"]}}.items()}
    before = {n: default_state(n, hv) for n, hv in hosts.items()}
    code, run_dir = go(tmp_path, hosts)
    r = result(run_dir)
    assert {v["final"] for v in r["nodes"].values()} == {"rolled_back"}, (code, r)
    for n in hosts:
        st = sim_state(run_dir, n)
        assert st["packages"] == before[n]["packages"], n
        assert st["loaded_driver"] == "575.57.08" and all(s["active"] for s in st["services"].values()), n
        # held / version-locked again exactly as before the change
        assert st["holds"] == before[n]["holds"] and st.get("version_locks") == before[n].get("version_locks"), n
    assert sim_state(run_dir, "rhel")["module_stream"] == "575-open"
    assert sim_state(run_dir, "rhel")["version_locks"] == ["nvidia-driver-3:575.57.08-1.el9.*"]
    assert sim_state(run_dir, "arch")["holds"] == ["nvidia-driver-575-server-open"]
    # Canonical's precompiled 575 module came back (in the baseline, in the restore), signed
    assert "linux-modules-nvidia-575-server-open-6.8.0-45-generic" in sim_state(run_dir, "pre")["packages"]
    facts = {(x["node"], x["stage"]): x["facts"] for x in journal(run_dir) if x["type"] == "facts"}
    assert "linux-modules-nvidia-575-server-open-6.8.0-45-generic" in {
        p["name"] for p in facts[("pre", "baseline")]["driver_packages"]}
    plans = {x["node"]: x["steps"] for x in journal(run_dir) if x["type"] == "rollback_plan"}
    restore = next(s for s in plans["rhel"] if s["action"] == "restore_driver")
    assert restore["holds"] == ["nvidia-driver"]
    rcmds = commands(run_dir, "rhel")
    last_install = max(i for i, x in enumerate(rcmds) if x.startswith("dnf install"))
    # the 580 locks the upgrade put back are released before the restore, the baseline's added after it
    relock = next(i for i, x in enumerate(rcmds) if x.startswith("dnf versionlock add nvidia-open"))
    release = next(i for i, x in enumerate(rcmds) if i > relock and x.startswith("dnf versionlock delete"))
    assert "nvidia-driver" in rcmds[release].split()
    assert release < last_install < rcmds.index("dnf versionlock add nvidia-driver", last_install)


DEEPEP_OPTIONS = 'NVreg_EnableStreamMemOPs=1 NVreg_RegistryDwords="PeerMappingOverride=1;"'
K3_CONF = "/etc/modprobe.d/nvidia-k3.conf"


def test_rollback_writes_back_the_nvidia_module_options_the_reinstall_dropped_on_each_path(tmp_path):
    # the upgrade's reinstall drops the site's nvidia options (driver_params_lost) and CUDA then
    # fails: the rollback writes the file back before its reboot, so the restored module loads
    # with the baseline's options; a node without such a file gets none written
    lost = {"sim_nvidia_module_options": DEEPEP_OPTIONS, "sim_faults": ["driver_params_lost", "cuda_init_fails"]}
    hosts = {"deb": dict(lost), "rhel": {"ansible_os_family": "RedHat", **lost},
             "plain": {"sim_faults": ["cuda_init_fails"]}}
    code, run_dir = go(tmp_path, hosts)
    r = result(run_dir)
    assert {v["final"] for v in r["nodes"].values()} == {"rolled_back"}, (code, r)
    facts = {(x["node"], x["stage"]): x["facts"] for x in journal(run_dir) if x["type"] == "facts"}
    plans = {x["node"]: x for x in journal(run_dir) if x["type"] == "rollback_plan"}
    done = {x["node"]: {a["action"]: a for a in x["results"]} for x in journal(run_dir) if x["type"] == "rollback_done"}
    for n in ("deb", "rhel"):
        # the upgrade lost them: the module it loaded ran on the driver's defaults
        assert facts[(n, "driver_upgrade")]["nvidia_params"]["EnableStreamMemOPs"] == "0", n
        st = sim_state(run_dir, n)
        assert st["modprobe_d"][K3_CONF] == f"options nvidia {DEEPEP_OPTIONS}\n", n
        params = parsers.parse_nvidia_params(dispatch(run_dir / "sim-hosts" / n,
                                                      ["cat", "/proc/driver/nvidia/params"]).stdout)
        assert (params["EnableStreamMemOPs"], params["RegistryDwords"]) == ("1", "PeerMappingOverride=1;"), n
        # only the file that sets the nvidia module's options: the driver package's own
        # (options nvidia-drm) is the restored package's to put back
        restore = next(s for s in plans[n]["steps"] if s["action"] == "restore_driver")
        assert [f["file"] for f in restore["module_options"]] == [K3_CONF], n
        assert f"write back {K3_CONF} as the baseline saw it" in " ".join(plans[n]["described"]), n
        assert done[n]["restore_driver"]["detail"] == f"driver restored to 575.57.08; module options restored: {K3_CONF}"
        cmds = commands(run_dir, n)
        writes = [i for i, c in enumerate(cmds) if c.startswith("tee ")]
        assert [cmds[i] for i in writes] == [f"tee {K3_CONF}"], n
        # after the restore's package install, before the reboot that loads the module
        install = "apt-get install" if n == "deb" else "dnf install"
        assert max(i for i, c in enumerate(cmds) if c.startswith(install)) < writes[0] < \
            max(i for i, c in enumerate(cmds) if c == "reboot"), n
        ev = sorted((run_dir / "evidence" / n).glob("*rollback*/module-options-restored.txt"))
        assert len(ev) == 1, n
        text = ev[0].read_text()
        assert text.startswith(f"{K3_CONF}: missing; written back as the baseline recorded it") and DEEPEP_OPTIONS in text
    assert "module_options" not in next(s for s in plans["plain"]["steps"] if s["action"] == "restore_driver")
    assert not any(c.startswith("tee ") for c in commands(run_dir, "plain"))
    assert done["plain"]["restore_driver"]["detail"] == "driver restored to 575.57.08"


def test_behind_sshd_tee_writes_the_simulated_hosts_modprobe_d_not_this_machines(node):
    """Behind a real sshd the simulator runs as plain executables: a ``tee`` into
    /etc/modprobe.d is the simulated host's (as the rollback writes it), never this machine's."""
    import json
    import os
    import subprocess
    import sys

    d = node()
    real = Path("/etc/modprobe.d/nvidia-k3-sim-test.conf")
    p = subprocess.run([sys.executable, "-m", "k3sim", "tee", str(real)], input=b"options nvidia X=1\n",
                       capture_output=True, env={**os.environ, "K3SIM_STATE": str(d)}, timeout=60)
    assert (p.returncode, p.stdout) == (0, b"options nvidia X=1\n"), p.stderr
    assert json.loads((d / "state.json").read_text())["modprobe_d"][str(real)] == "options nvidia X=1\n"
    assert not real.exists()


def test_install_without_the_fabric_manager_fails_the_driver_stage_and_rolls_back(tmp_path):
    pb = short_playbook(tmp_path / "pb.yml", install={
        "apt": [["apt-get", "update"],
                ["apt-get", "install", "-y", "--allow-downgrades",
                 "{{ driver.install | reject('match', 'nvidia-fabricmanager') | list }}"]],
        "dnf": [["dnf", "install", "-y", "{{ driver.install }}"]]})
    code, run_dir = go(tmp_path, {"n1": {}}, pb)
    n = result(run_dir)["nodes"]["n1"]
    assert (n["final"], n["failed_stage"]) == ("rolled_back", "driver_upgrade"), (code, n)
    assert "without the fabric manager package nvidia-fabricmanager-580" in n["reason"]
    st = sim_state(run_dir, "n1")
    assert st["loaded_driver"] == "575.57.08" and st["services"]["nvidia-fabricmanager"]["active"]


def test_vendor_task_files_over_real_sshd_through_ansible_runner(sshd_cluster, tmp_path):
    """Both task files, run by ansible-runner against real sshd: NVIDIA's CUDA repository on
    Ubuntu (with a held package) and RHEL 9 module streams; versions resolved on the node."""
    import json

    from k3sim.state import executed

    sim = {"deb": {"nvidia_driver_source": "cuda-repo", "sim_held_packages": ["nvidia-driver-575-open"],
                   "sim_device_plugin": True},
           "rh": {"ansible_os_family": "RedHat", "sim_held_packages": ["nvidia-driver"]}}
    with sshd_cluster(sim) as c:
        inv = c.inventory(tmp_path / "inv" / "hosts.yml",
                          host_vars={n: {k: v for k, v in hv.items() if not k.startswith("sim_")}
                                     for n, hv in sim.items()})
        run_dir = tmp_path / "run"
        code = main(["run", str(short_playbook(tmp_path / "pb.yml", reboot_timeout=60)), "-i", str(inv), "--yes",
                     "--run-dir", str(run_dir)])
        r = result(run_dir)
        assert code == 0 and {n: v["final"] for n, v in r["nodes"].items()} == {"deb": "upgraded", "rh": "upgraded"}
        assert len(list(run_dir.rglob("vendor-tasks-1-job_events_*"))) >= 2       # ansible-runner ran both files
        deb, rh = (json.loads((c.hosts[n].state / "state.json").read_text()) for n in ("deb", "rh"))
        deb_cmds, rh_cmds = executed(c.hosts["deb"].state), executed(c.hosts["rh"].state)
    assert deb["packages"]["nvidia-driver-580-open"] == "580.95.05-0ubuntu1"
    assert deb["packages"]["nvidia-fabricmanager"] == "580.95.05-1" and "nvidia-fabricmanager-575" not in deb["packages"]
    assert rh["packages"]["nvidia-driver"] == "580.95.05-1.el9" and rh["module_stream"] == "580-open"
    assert "nvidia-driver-580-open" in deb["holds"]
    # the RHEL version lock was released before the task file ran and put on the new version after
    assert "nvidia-driver-3:580.95.05-1.el9.*" in rh["version_locks"]
    assert rh_cmds.index("dnf versionlock delete nvidia-driver") < rh_cmds.index("dnf -y module reset nvidia-driver")
    assert deb["services"]["nvidia-device-plugin"]["active"]
    assert any(x.startswith("systemctl disable --now") and x.endswith("nvidia-device-plugin") for x in deb_cmds)
    assert any(x.startswith("apt-cache madison linux-headers-6.8.0-45-generic nvidia-driver-580-open") for x in deb_cmds)
    install = [x for x in deb_cmds if x.startswith("apt-get install")]
    assert len(install) == 1 and "nvidia-driver-580-open=580.95.05-0ubuntu1" in install[0]
    assert any(x.startswith("dnf list --showduplicates kernel-devel-matched") for x in rh_cmds)
    assert rh_cmds.index("dnf -y module reset nvidia-driver") < rh_cmds.index("dnf -y module enable nvidia-driver:580-open")
    for st in (deb, rh):
        assert st["loaded_driver"] == "580.95.05" and all(s["active"] for s in st["services"].values())
