"""Single stages through the strict fake executor: the exact commands each sends, and
what it makes of a failing command, an output it cannot parse and a missing tool.

Each test scripts every command the stage may send, in order (the fixture fails the
test on any other command, and on a scripted one never sent), runs the real stage code
on the ``NodeCtx`` the engine gives it, and reads the real journal and evidence the step
runner wrote under a temporary run directory.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from k3rollout.checks import parsers
from k3rollout.stages import cordon, cuda_check, uncordon

# the node side these tests script is a Docker host's (docker run/inspect/start); under
# scheduler: kubernetes a node is run through Pods unless its inventory says docker
DOCKER = {"k3_workload_backend": "docker"}

DATA = Path(__file__).resolve().parents[1] / "data" / "parsers"
SMI_TABLE = (DATA / "nvidia-smi-570-h20.txt").read_text()
SMI_QUERY = (DATA / "nvidia-smi-query-h200.csv").read_text()
IMAGE_INSPECT = (DATA / "vllm-openai-image-inspect.json").read_text()      # CUDA_VERSION=12.8.1
DOCKER_INFO = (DATA / "docker-info.json").read_text()
# the cuda13 image the K3 recipe needs: the same inspect with CUDA 13.0.1 in its Env
IMAGE_INSPECT_CUDA13 = IMAGE_INSPECT.replace("CUDA_VERSION=12.8.1", "CUDA_VERSION=13.0.1") \
    .replace("cuda>=12.8", "cuda>=13.0")
# `nvidia-smi -L` on an A100 node with MIG enabled on GPU 0
# (https://github.com/influxdata/telegraf/issues/5812): MIG devices are not GPUs
SMI_L_MIG = """GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-513536b6-7d19-9063-b049-1e69664bb298)
  MIG 1g.20gb     Device  0: (UUID: MIG-ce861fb0-a248-58ce-a9a8-f9adbc22a66a)
  MIG 1g.20gb     Device  1: (UUID: MIG-a45882f0-9215-5733-a0c1-49286ab31cb5)
  MIG 1g.20gb     Device  2: (UUID: MIG-f00d722c-f4e1-52c9-aa31-750441ae1bfe)
  MIG 1g.20gb     Device  3: (UUID: MIG-930574a9-d43a-5d2b-95da-3e68384c8d6b)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-d8594bd4-0fc3-8595-e355-7c98138f3b95)
GPU 2: NVIDIA A100-SXM4-80GB (UUID: GPU-5e375e7e-b41f-155b-dcdc-534524c356fc)
GPU 3: NVIDIA A100-SXM4-80GB (UUID: GPU-69ec2344-ebac-b028-f88f-452abb3d7f11)
"""
SMI_FAILED = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
              "latest NVIDIA driver is installed and running.\n\n")
# /etc/os-release of Ubuntu 22.04.3 LTS (jammy), as the base-files package ships it
OS_RELEASE_JAMMY = """PRETTY_NAME="Ubuntu 22.04.3 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.3 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=jammy
"""
TORCH = ["docker", "run", "--rm", "--gpus", "all", "--entrypoint", "python3", "vllm/vllm-openai:kimi-k3", "-c",
         cuda_check.TORCH_INIT]
SMI_L = ["docker", "run", "--rm", "--gpus", "all", "--entrypoint", "nvidia-smi", "vllm/vllm-openai:kimi-k3", "-L"]


# ---------------------------------------------------------------- the fake itself


def test_fake_refuses_an_unscripted_command(fake_executor_class):
    fake = fake_executor_class()
    fake.expect(["uname", "-r"], stdout="5.15.0-83-generic\n")
    with pytest.raises(AssertionError, match=r"unscripted command on gpu-01: nvidia-smi\n.*expected next: "
                                             r"<any host>: uname -r"):
        fake.run("gpu-01", ["nvidia-smi"])
    assert fake.problems()[0].startswith("unscripted command on gpu-01: nvidia-smi")
    assert fake.problems()[1] == "scripted but never sent: <any host>: uname -r"


def test_fake_enforces_order_host_and_stdin(fake_executor_class):
    fake = fake_executor_class()
    fake.expect(["true"], host="gpu-02")
    with pytest.raises(AssertionError):
        fake.run("gpu-01", ["true"])            # same argv, another host
    fake = fake_executor_class()
    fake.expect(["a"])
    fake.expect(["b"])
    with pytest.raises(AssertionError):
        fake.run("gpu-01", ["b"])               # scripted, but not next
    fake = fake_executor_class()
    fake.expect(["tee", "/etc/x"], stdin=b"y\n")
    with pytest.raises(AssertionError, match="stdin"):
        fake.run("gpu-01", ["tee", "/etc/x"], stdin=b"z\n")


def test_fake_patterns_and_used_up_script(fake_executor_class):
    fake = fake_executor_class()
    fake.expect(["docker", "logs", re.compile(r"k3rollout-\w+")], stdout="x")
    assert fake.run("gpu-01", ["docker", "logs", "k3rollout-smoke"]).stdout == "x"
    assert fake.problems() == []
    with pytest.raises(AssertionError, match="the script is used up"):
        fake.run("gpu-01", ["docker", "logs", "k3rollout-smoke"])
    with pytest.raises(AssertionError, match="wait_for_host"):
        fake.wait_for_host("gpu-01", 5)
    with pytest.raises(AssertionError, match="api_host"):
        fake.api_host("gpu-01")


# ---------------------------------------------------------------- cordon (kubernetes)
# The Kubernetes scheduler's operations are API calls from the controller through the
# official client (k3rollout/scheduler/kubernetes.py), never commands on the node: these
# tests send none through the fake executor and drive the simulated API server instead.


def kube_harness(stage_harness, kube_api):
    srv, cfg = kube_api
    return stage_harness(group_vars={**DOCKER, "k3_kubeconfig": str(cfg)}), srv


def test_cordon_drains_through_the_api_then_reads_the_state(stage_harness, fake_executor, kube_api):
    from k3sim.kubeapi import audited

    h, srv = kube_harness(stage_harness, kube_api)
    out = cordon.run(h.ctx("cordon"))
    assert out.passed and out.facts == {"scheduler_state": "cordoned"}
    assert fake_executor.sent() == []                    # nothing ran on the node
    started = [r for r in h.steps("step_started") if r["step"] == "drain"]
    assert started and started[0]["once"] is True and started[0]["key"] == "02-cordon/drain"
    assert started[0]["kind"] == "api" and started[0]["ran_on"] == srv.url
    done = [r for r in h.steps() if r["step"] == "drain"][0]
    assert done["rc"] == 0
    answer = json.loads(h.evidence(done["evidence"]).split("--- answer ---\n", 1)[1].split("\n--- error ---")[0])
    assert [p.split("/")[0] for p in answer["evicted"]] == ["inference"]
    changes = audited(srv.cluster.root / "gpu-01")
    assert 'PATCH nodes/gpu-01 {"spec": {"unschedulable": true}}' in changes
    assert sum(c.endswith("/eviction") for c in changes) == 1


def test_cordon_failing_drain_fails_the_stage_with_its_reason(stage_harness, fake_executor, kube_api_pdb):
    h, _ = kube_harness(stage_harness, kube_api_pdb)
    ctx = h.ctx("cordon")
    ctx.params = ctx.params.model_copy(update={"drain_timeout": 0.5})
    out = cordon.run(ctx)
    assert not out.passed and out.reason.startswith("drain failed: drain of gpu-01 timed out after 0.5s")
    assert "disruption budget" in out.reason
    assert out.facts == {"scheduler_state": "cordoned"}
    assert fake_executor.sent() == []


def test_cordon_with_the_api_unreachable(stage_harness, fake_executor, dead_kubeconfig):
    h = stage_harness(group_vars={**DOCKER, "k3_kubeconfig": str(dead_kubeconfig)})
    out = cordon.run(h.ctx("cordon"))
    assert not out.passed and out.reason.startswith("drain failed: ")
    assert out.facts == {"scheduler_state": "unknown"}       # never read as schedulable or cordoned
    assert fake_executor.sent() == []


# ---------------------------------------------------------------- cordon (slurm)


def test_slurm_cordon_runs_scontrol_on_the_controller(stage_harness, fake_executor):
    h = stage_harness(scheduler="slurm")
    show = ["scontrol", "show", "node", "gpu-01"]
    fake_executor.expect(show, host="controller", stdout=(DATA / "scontrol-show-node-idle.txt").read_text())
    fake_executor.expect(["scontrol", "update", "NodeName=gpu-01", "State=DRAIN", "Reason=k3rollout unit-run"],
                         host="controller")
    fake_executor.expect(show, host="controller", stdout=(DATA / "scontrol-show-node-idle-drain.txt").read_text())
    fake_executor.expect(show, host="controller", stdout=(DATA / "scontrol-show-node-idle-drain.txt").read_text())
    out = cordon.run(h.ctx("cordon"))
    assert out.passed and out.facts == {"scheduler_state": "cordoned"}
    started = [r for r in h.steps("step_started")]
    assert {r.get("ran_on") for r in started} == {"controller"}
    drain = [r for r in started if r["step"] == "drain"][0]
    assert drain["meta"] == {"state_before": "schedulable"} and drain["once"] is True


def test_slurm_cordon_with_an_unparseable_answer_drains_and_never_passes_unknown(stage_harness, fake_executor):
    h = stage_harness(scheduler="slurm")
    show = ["scontrol", "show", "node", "gpu-01"]
    fake_executor.expect(show, host="controller", stdout="slurm_load_node error: Unable to contact slurm controller\n")
    fake_executor.expect(["scontrol", "update", "NodeName=gpu-01", "State=DRAIN", "Reason=k3rollout unit-run"],
                         host="controller", rc=1,
                         stderr="slurm_update error: Unable to contact slurm controller (connect failure)\n")
    fake_executor.expect(show, host="controller", rc=1,
                         stderr="slurm_load_node error: Unable to contact slurm controller (connect failure)\n")
    out = cordon.run(h.ctx("cordon"))
    assert not out.passed and out.reason == "drain failed (rc 1)"
    assert "Unable to contact slurm controller" in out.logs
    assert out.facts == {"scheduler_state": "unknown"}
    assert [r["meta"] for r in h.steps("step_started") if r["step"] == "drain"] == [{"state_before": "unknown"}]


# ---------------------------------------------------------------- once steps


def test_a_completed_drain_is_replayed_from_the_journal_not_sent_again(stage_harness, fake_executor, kube_api):
    from k3sim.kubeapi import audited

    h, srv = kube_harness(stage_harness, kube_api)
    assert cordon.run(h.ctx("cordon")).passed
    # the stage again (a resumed run): the drain is replayed from the journal, only reads go out
    assert cordon.run(h.ctx("cordon")).passed
    assert len([r for r in h.steps("step_started") if r["step"] == "drain"]) == 1
    changes = audited(srv.cluster.root / "gpu-01")
    assert changes.count('PATCH nodes/gpu-01 {"spec": {"unschedulable": true}}') == 1
    assert fake_executor.sent() == []


def test_an_unreachable_host_fails_the_step_with_the_host_named(stage_harness, fake_executor, kube_api):
    from k3rollout.errors import HostUnreachable, StepFailed

    h, _ = kube_harness(stage_harness, kube_api)
    fake_executor.expect(["docker", "start", "vllm-k2"], raises=HostUnreachable("host does not answer", host="gpu-01",
                                                                                command="docker start vllm-k2"))
    with pytest.raises(StepFailed, match="gpu-01"):
        uncordon.run(h.ctx("uncordon", facts={"stopped_serving": ["vllm-k2"]},
                           baseline={"scheduler_state": "schedulable"}))
    assert [r["error"] for r in h.steps("step_error")] == ["HostUnreachable"]


# ---------------------------------------------------------------- uncordon


def test_uncordon_restarts_serving_and_uncordons_a_node_that_was_schedulable(stage_harness, fake_executor,
                                                                            kube_api):
    from k3rollout.scheduler.k8s_api import KubernetesApi

    h, srv = kube_harness(stage_harness, kube_api)
    KubernetesApi(str(kube_api[1])).cordon("gpu-01")
    fake_executor.expect(["docker", "start", "vllm-k2"], stdout="vllm-k2\n")
    fake_executor.expect(["docker", "inspect", "-f", "{{.State.Status}} {{.RestartCount}}", "vllm-k2"],
                         stdout="running 0\n")
    out = uncordon.run(h.ctx("uncordon", facts={"stopped_serving": ["vllm-k2"]},
                             baseline={"scheduler_state": "schedulable"}))
    # the restart count the run leaves: observe compares its passes with it
    assert out.passed and out.facts == {"scheduler_state": "schedulable", "serving_restart_counts": {"vllm-k2": 0}}
    steps = [(r["step"], r["once"], r.get("kind")) for r in h.steps() if not r["step"].startswith("upgrade-state-")]
    assert steps == [("start-vllm-k2", False, None), ("state-vllm-k2", False, None), ("uncordon", True, "api"),
                     ("scheduler-state", False, "api")]


def test_uncordon_leaves_a_node_that_was_cordoned_before_the_run(stage_harness, fake_executor, kube_api):
    from k3rollout.scheduler.k8s_api import KubernetesApi
    from k3sim.kubeapi import audited

    h, srv = kube_harness(stage_harness, kube_api)
    KubernetesApi(str(kube_api[1])).cordon("gpu-01")
    out = uncordon.run(h.ctx("uncordon", baseline={"scheduler_state": "cordoned"}))
    assert out.passed and out.reason == "left out of service: it was cordoned before the run"
    assert out.facts == {"scheduler_state": "cordoned"}
    assert not [c for c in audited(srv.cluster.root / "gpu-01") if '"unschedulable": null' in c]


def test_uncordon_does_not_return_a_node_whose_workload_did_not_restart(stage_harness, fake_executor, kube_api):
    h, _ = kube_harness(stage_harness, kube_api)
    fake_executor.expect(["docker", "start", "vllm-k2"], rc=1,
                         stderr="Error response from daemon: could not select device driver \"\" with capabilities: "
                                "[[gpu]]\nError: failed to start containers: vllm-k2\n")
    fake_executor.expect(["docker", "inspect", "-f", "{{.State.Status}} {{.RestartCount}}", "vllm-k2"],
                         stdout="exited 0\n")
    out = uncordon.run(h.ctx("uncordon", facts={"stopped_serving": ["vllm-k2"]},
                             baseline={"scheduler_state": "schedulable"}))
    assert not out.passed
    assert out.reason == "existing workloads did not restart on the new driver: vllm-k2"
    assert out.facts == {"restarted_serving_failed": ["vllm-k2"]}


def test_uncordon_a_container_that_started_and_exited_is_not_restarted(stage_harness, fake_executor, kube_api):
    """``docker start`` answers 0 for a container whose process dies at once (CUDA init
    failing on the new driver): only its state afterwards tells."""
    h, _ = kube_harness(stage_harness, kube_api)
    fake_executor.expect(["docker", "start", "vllm-k2"], stdout="vllm-k2\n")
    fake_executor.expect(["docker", "inspect", "-f", "{{.State.Status}} {{.RestartCount}}", "vllm-k2"],
                         stdout="exited 0\n")
    out = uncordon.run(h.ctx("uncordon", facts={"stopped_serving": ["vllm-k2"]},
                             baseline={"scheduler_state": "schedulable"}))
    assert not out.passed and out.facts == {"restarted_serving_failed": ["vllm-k2"]}


def test_uncordon_with_the_api_unreachable(stage_harness, fake_executor, dead_kubeconfig):
    h = stage_harness(group_vars={**DOCKER, "k3_kubeconfig": str(dead_kubeconfig)})
    out = uncordon.run(h.ctx("uncordon", baseline={"scheduler_state": "schedulable"}))
    assert not out.passed and out.reason.startswith("uncordon failed: ")
    assert out.facts == {"scheduler_state": "unknown"}


# ---------------------------------------------------------------- cuda_check


def _cuda_ctx(h, driver="580.95.05"):
    return h.ctx("cuda_check", facts={"driver_version": driver})


def test_cuda_check_counts_gpus_not_mig_devices_and_inits_cuda(stage_harness, fake_executor):
    h = stage_harness(group_vars=DOCKER)
    fake_executor.expect(["docker", "image", "inspect", "vllm/vllm-openai:kimi-k3"], stdout=IMAGE_INSPECT_CUDA13)
    fake_executor.expect(SMI_L, stdout=SMI_L_MIG)
    fake_executor.expect(TORCH, stdout="cuda_available=True device_count=4\n")
    out = cuda_check.run(_cuda_ctx(h))
    assert out.passed, out.reason
    assert out.facts["container_gpu_count"] == 4 and out.facts["cuda_device_count"] == 4
    assert out.facts["cuda_init_ok"] is True and out.facts["image_cuda"] == "13.0.1"
    assert out.facts["compat"]["compatible"] is True
    assert [c.timeout for c in fake_executor.calls[1:]] == [600, 600]


def test_cuda_check_refuses_a_cuda13_image_on_r575_without_starting_it(stage_harness, fake_executor):
    h = stage_harness(group_vars=DOCKER)
    fake_executor.expect(["docker", "image", "inspect", "vllm/vllm-openai:kimi-k3"], stdout=IMAGE_INSPECT_CUDA13)
    out = cuda_check.run(_cuda_ctx(h, driver="575.57.08"))
    assert not out.passed and out.facts["compat"]["compatible"] is False
    assert "580" in out.reason
    assert len(fake_executor.calls) == 1            # no container was started


def test_cuda_check_pulls_a_missing_image_and_fails_when_the_pull_fails(stage_harness, fake_executor):
    h = stage_harness(group_vars=DOCKER)
    fake_executor.expect(["docker", "image", "inspect", "vllm/vllm-openai:kimi-k3"], rc=1, stdout="[]\n",
                         stderr="Error response from daemon: No such image: vllm/vllm-openai:kimi-k3\n")
    fake_executor.expect(["docker", "pull", "vllm/vllm-openai:kimi-k3"], rc=1,
                         stderr="Error response from daemon: manifest for vllm/vllm-openai:kimi-k3 not found: "
                                "manifest unknown: manifest unknown\n")
    out = cuda_check.run(_cuda_ctx(h))
    assert not out.passed and out.reason == "image vllm/vllm-openai:kimi-k3 cannot be pulled"
    assert "manifest unknown" in out.logs
    assert fake_executor.calls[1].timeout == 3600


def test_cuda_check_without_docker(stage_harness, fake_executor):
    h = stage_harness(group_vars=DOCKER)
    fake_executor.missing(["docker", "image", "inspect", "vllm/vllm-openai:kimi-k3"])
    fake_executor.missing(["docker", "pull", "vllm/vllm-openai:kimi-k3"])
    out = cuda_check.run(_cuda_ctx(h))
    assert not out.passed and "docker: command not found" in out.logs


def test_cuda_check_gpus_invisible_in_the_container(stage_harness, fake_executor):
    h = stage_harness(group_vars=DOCKER)
    fake_executor.expect(["docker", "image", "inspect", "vllm/vllm-openai:kimi-k3"], stdout=IMAGE_INSPECT_CUDA13)
    fake_executor.expect(SMI_L, rc=9, stdout=SMI_FAILED)
    out = cuda_check.run(_cuda_ctx(h))
    assert not out.passed and out.reason == "GPUs not visible in a container (rc 9)"
    assert out.facts["container_gpu_count"] == 0 and "couldn't communicate" in out.logs


def test_cuda_check_unparseable_torch_output_is_a_failed_init(stage_harness, fake_executor):
    h = stage_harness(group_vars=DOCKER)
    fake_executor.expect(["docker", "image", "inspect", "vllm/vllm-openai:kimi-k3"], stdout=IMAGE_INSPECT_CUDA13)
    fake_executor.expect(SMI_L, stdout=SMI_L_MIG)
    # rc 0 but no device_count line (e.g. a warning printed instead and the print lost)
    fake_executor.expect(TORCH, stdout="UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount()\n")
    out = cuda_check.run(_cuda_ctx(h))
    assert not out.passed and out.reason == "CUDA init failed in vllm/vllm-openai:kimi-k3 (rc 0)"
    assert out.facts["cuda_init_ok"] is False and out.facts["cuda_device_count"] == 0


def test_cuda_check_unparseable_image_inspect_raises_parse_error(stage_harness, fake_executor):
    h = stage_harness(group_vars=DOCKER)
    fake_executor.expect(["docker", "image", "inspect", "vllm/vllm-openai:kimi-k3"], stdout="<html>proxy error</html>")
    with pytest.raises(parsers.ParseError, match="docker image inspect: not JSON"):
        cuda_check.run(_cuda_ctx(h))


# ---------------------------------------------------------------- baseline


def _baseline_head(fake, smi_rc=0, smi_out=SMI_TABLE, smi_missing=False):
    fake.expect(["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"], stdout="2026-12-03T09:00:00Z\n")
    fake.expect(["cat", "/etc/os-release"], stdout=OS_RELEASE_JAMMY)
    if smi_missing:
        fake.missing(["nvidia-smi"])
    else:
        fake.expect(["nvidia-smi"], rc=smi_rc, stdout=smi_out)


DPKG_OUT = ("nvidia-driver-575-server-open\t575.57.08-0ubuntu0.22.04.1\tii \n"
            "libnvidia-compute-575-server\t575.57.08-0ubuntu0.22.04.1\tii \n"
            "libnvidia-compute-550-server\t550.127.08-0ubuntu0.22.04.1\trc \n")
PS_LINE = json.dumps({"Command": "\"vllm serve\"", "CreatedAt": "2026-12-02 21:14:03 +0000 UTC", "ID": "4f1c2a9be0d1",
                      "Image": "vllm/vllm-openai:kimi-k3", "Labels": "", "LocalVolumes": "0", "Mounts": "",
                      "Names": "kimi-k3", "Networks": "host", "Ports": "", "RunningFor": "12 hours ago",
                      "Size": "0B", "State": "exited", "Status": "Exited (1) 12 hours ago"})
FAILED_LOG = ("RuntimeError: The NVIDIA driver on your system is too old (found version 12090). Please update your "
              "GPU driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/"
              "index.aspx\n")


def test_baseline_sends_exactly_these_commands(stage_harness, fake_executor, kube_api):
    h, _ = kube_harness(stage_harness, kube_api)
    f = fake_executor
    _baseline_head(f)
    f.expect(parsers.GPU_QUERY_ARGV, stdout=SMI_QUERY)
    f.expect(["cat", "/proc/driver/nvidia/version"],
             stdout="NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release Build  "
                    "(dvs-builder@U16-I3-B03-4-3)  Wed May 21 23:56:03 UTC 2025\n")
    f.expect(["uname", "-r"], stdout="5.15.0-83-generic\n")
    f.expect(["cat", "/proc/sys/kernel/random/boot_id"], stdout="5e5d0e6e-4c1b-4b6e-9f5e-0c0a4b8d2a11\n")
    f.expect(parsers.DPKG_ARGV, stdout=DPKG_OUT)
    # Canonical's precompiled modules: none on this DKMS node (dpkg-query says so, rc 1)
    f.expect(parsers.DPKG_MODULES_ARGV, rc=1, stderr="dpkg-query: no packages found matching linux-modules-nvidia-*\n")
    f.expect(["apt-cache", "policy", "nvidia-driver-575-server-open", "libnvidia-compute-575-server"], stdout="")
    f.expect(["apt-mark", "showhold"], stdout="nvidia-driver-575-server-open\n")
    f.expect(["grep", "-rH", ".", "/etc/modprobe.d"],
             stdout="/etc/modprobe.d/blacklist-nouveau.conf:blacklist nouveau\n")
    f.expect(["mokutil", "--sb-state"], stdout="SecureBoot disabled\n")
    f.expect(["ls", "/proc/driver/nvidia-nvswitch/devices"], stdout="0000:05:00.0\n0000:06:00.0\n")
    f.expect(["nvidia-smi", "topo", "-m"], stdout="\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n")
    f.expect(["systemctl", "is-active", "nvidia-fabricmanager"], stdout="active\n")
    f.expect(["docker", "info", "--format", "{{json .}}"], stdout=DOCKER_INFO)
    f.expect(["docker", "ps", "-a", "--format", "{{json .}}"], stdout=PS_LINE + "\n")
    f.expect(["docker", "image", "inspect", "vllm/vllm-openai:kimi-k3"], stdout=IMAGE_INSPECT_CUDA13)
    f.expect(["docker", "inspect", "kimi-k3"], stdout="[{}]\n")
    f.expect(["docker", "logs", "kimi-k3"], stderr=FAILED_LOG)
    out = h.run_stage("baseline")
    assert out.passed, out.reason
    fx = out.facts
    assert (fx["os_family"], fx["pkg_mgr"], fx["cuda_driver_version"]) == ("Debian", "apt", "12.8")
    assert (fx["driver_version"], fx["driver_branch"], fx["gpu_count"]) == ("575.57.08", 575, 2)
    assert fx["module_version"] == "575.57.08" and fx["kernel"] == "5.15.0-83-generic"
    assert [p["name"] for p in fx["driver_packages"]] == ["nvidia-driver-575-server-open",
                                                          "libnvidia-compute-575-server"]    # rc row left out
    assert fx["held_packages"] == ["nvidia-driver-575-server-open"]
    assert fx["secure_boot"] is False and fx["nvswitch"] is True and fx["fabricmanager"] == "active"
    assert fx["nvidia_runtime"] is True and fx["target_image_cuda"] == "13.0.1"
    assert fx["target_image_compat"]["compatible"] is False          # CUDA 13 on r575: why the run exists
    assert fx["prior_failures"][0]["container"] == "kimi-k3" and fx["prior_failures"][0]["inspect_saved"]
    assert fx["scheduler"] == "kubernetes" and fx["scheduler_state"] == "schedulable"
    # every command is journaled and kept as evidence under the stage's folder
    done = [r for r in h.steps() if r.get("kind") != "api"]   # the scheduler's are API calls
    assert len(done) == len(f.calls) == 21
    assert [r["step"] for r in h.steps() if r.get("kind") == "api"] == ["scheduler-state", "gpu-operator-check"]
    assert all(r["evidence"].startswith("gpu-01/01-baseline/") for r in done)
    assert "too old (found version 12090)" in h.evidence(
        next(r["evidence"] for r in done if r["step"] == "failed-container-logs-kimi-k3"))


def test_baseline_stops_when_nvidia_smi_fails(stage_harness, fake_executor):
    h = stage_harness(group_vars=DOCKER)
    _baseline_head(fake_executor, smi_rc=9, smi_out=SMI_FAILED)
    out = h.run_stage("baseline")
    assert not out.passed
    assert out.reason == "nvidia-smi fails before any change (rc 9); the node is not a sound baseline"
    assert "couldn't communicate with the NVIDIA driver" in out.logs
    assert out.facts == {"os_family": "Debian", "pkg_mgr": "apt"}


def test_baseline_without_nvidia_smi(stage_harness, fake_executor):
    h = stage_harness(group_vars=DOCKER)
    _baseline_head(fake_executor, smi_missing=True)
    out = h.run_stage("baseline")
    assert not out.passed and "(rc 127)" in out.reason
    assert "nvidia-smi: command not found" in out.logs


def test_baseline_unparseable_nvidia_smi_is_unexpected_output(stage_harness, fake_executor):
    """rc 0 but no header (here: a GPU that fell off the bus): the engine turns the
    parser's error into the stage's failure, with the output kept as evidence."""
    h = stage_harness(group_vars=DOCKER)
    lost = "Unable to determine the device handle for GPU0000:18:00.0: Unknown Error\n"
    _baseline_head(fake_executor, smi_out=lost)
    out = h.run_stage("baseline")
    assert not out.passed
    assert out.reason == "unexpected output: no 'Driver Version ... CUDA Version' header in nvidia-smi output"
    smi = [r for r in h.steps() if r["step"] == "nvidia-smi"][0]
    assert lost in h.evidence(smi["evidence"])


def test_the_fixture_fails_a_test_that_left_a_scripted_command_unsent(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")      # the inner run needs no plugins
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_x="""
        def test_unsent(fake_executor):
            fake_executor.expect(["kubectl", "uncordon", "gpu-01"])

        def test_swallowed(fake_executor):
            try:
                fake_executor.run("gpu-01", ["reboot"])
            except AssertionError:
                pass                      # a stage that caught it still fails the test

        def test_clean(fake_executor):
            fake_executor.expect(["true"])
            assert fake_executor.run("gpu-01", ["true"]).ok
    """)
    res = pytester.runpytest_inprocess("-q", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=3, errors=2)
    res.stdout.fnmatch_lines(["*scripted but never sent: <any host>: kubectl uncordon gpu-01*",
                              "*unscripted command on gpu-01: reboot*"])


# ---------------------------------------------------------------- driver_upgrade: reboot and verify

BOOT_ID = ["cat", "/proc/sys/kernel/random/boot_id"]
OLD_BOOT, NEW_BOOT = "5e5d0e6e-4c1b-4b6e-9f5e-0c0a4b8d2a11\n", "0b3a7c52-9d64-4f0e-8a3b-7e1d2c9f4a60\n"


def test_reboot_journals_the_boot_id_and_waits_for_a_new_one(stage_harness, fake_executor):
    from k3rollout.stages.driver.host import reboot_and_wait

    h = stage_harness(group_vars=DOCKER)
    fake_executor.expect(BOOT_ID, stdout=OLD_BOOT)
    fake_executor.expect(["reboot"])
    fake_executor.expect_wait(0.1)
    fake_executor.expect(BOOT_ID, stdout=OLD_BOOT)           # still the old kernel for a moment
    fake_executor.expect_wait(0.1)
    fake_executor.expect(BOOT_ID, stdout=NEW_BOOT)
    ok, why, _ = reboot_and_wait(h.ctx("driver_upgrade"), "reboot", timeout=30)
    assert ok and why == ""
    started = [r for r in h.steps("step_started") if r["step"] == "reboot"]
    assert started[0]["once"] and started[0]["meta"] == {"boot_id_before": OLD_BOOT.strip()}
    assert [t for _, t in fake_executor.waits][0] <= 30


def test_a_host_refusing_at_once_while_it_boots_is_polled_not_spun_on(stage_harness, fake_executor):
    """A transport whose wait fails immediately (connection refused while the host boots)
    is retried at a pause, not in a tight loop: over 1 s, a handful of waits, then the
    timeout with the last error."""
    from k3rollout.errors import HostUnreachable
    from k3rollout.stages.driver.host import wait_for_new_boot

    h = stage_harness(group_vars=DOCKER)
    for _ in range(50):
        fake_executor.expect_wait(HostUnreachable("connection refused", host="gpu-01"))
    ok, why, _ = wait_for_new_boot(h.ctx("driver_upgrade"), OLD_BOOT.strip(), timeout=1.0)
    assert not ok and "did not come back within 1s" in why and "connection refused" in why
    assert 2 <= len(fake_executor.waits) <= 10, len(fake_executor.waits)
    fake_executor.wait_answers.clear()       # the unused answers are this test's margin


def test_a_reboot_that_dropped_the_connection_is_settled_not_repeated(stage_harness, fake_executor):
    """`reboot` over SSH usually loses its session: the probe sees the new boot id and
    the reboot is not sent a second time."""
    from k3rollout.errors import ConnectionLost
    from k3rollout.stages.driver.host import reboot_and_wait

    h = stage_harness(group_vars=DOCKER)
    fake_executor.expect(BOOT_ID, stdout=OLD_BOOT)
    fake_executor.expect(["reboot"], raises=ConnectionLost("connection lost while the command ran", host="gpu-01"))
    fake_executor.expect_wait(0.1)                           # the step runner waits for the host
    fake_executor.expect_wait(0.1)                           # the probe's own wait
    fake_executor.expect(BOOT_ID, stdout=NEW_BOOT)
    fake_executor.expect_wait(0.1)                           # the stage's wait after the step
    fake_executor.expect(BOOT_ID, stdout=NEW_BOOT)
    ok, _, _ = reboot_and_wait(h.ctx("driver_upgrade"), "reboot", timeout=30)
    assert ok
    assert [(r["step"], r["took_effect"]) for r in h.steps("step_settled")] == [("reboot", True)]
    assert [c.argv for c in fake_executor.calls].count(["reboot"]) == 1


SMI_QUERY_580 = SMI_QUERY.replace("575.57.08", "580.95.05")


def _verify_script(fake, module="580.95.05"):
    fake.expect(parsers.GPU_QUERY_ARGV, stdout=SMI_QUERY_580)
    fake.expect(["cat", "/proc/driver/nvidia/version"],
                stdout=f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {module}  Release Build  "
                       "(dvs-builder@U16-I3-B03-4-3)  Thu Sep 18 22:46:35 UTC 2025\n")
    fake.expect(["dkms", "status"], stdout=f"nvidia/{module}, 5.15.0-83-generic, x86_64: installed\n")
    fake.expect(["cat", "/proc/driver/nvidia/params"], stdout=(DATA / "proc-driver-nvidia-params.txt").read_text())
    fake.expect(["systemctl", "is-active", "nvidia-fabricmanager"], stdout="active\n")
    fake.expect(parsers.DPKG_ARGV, stdout="nvidia-driver-580-server-open\t580.95.05-0ubuntu0.22.04.2\tii \n")


def test_verify_driver_after_the_reboot(stage_harness, fake_executor):
    from k3rollout.stages.driver.host import verify_driver

    h = stage_harness(group_vars=DOCKER)
    _verify_script(fake_executor)
    ok, why, f = verify_driver(h.ctx("driver_upgrade", facts={"pkg_mgr": "apt"}), "580.95.05")
    assert ok, why
    assert f["driver_version"] == f["module_version"] == "580.95.05" and f["fabricmanager"] == "active"
    assert f["nvidia_params"]["OpenRmEnableUnsupportedGpus"] == "1"
    assert f["driver_packages"] == [{"name": "nvidia-driver-580-server-open", "version": "580.95.05-0ubuntu0.22.04.2",
                                     "status": "ii"}]


def test_verify_driver_catches_a_stale_kernel_module(stage_harness, fake_executor):
    """nvidia-smi (user space) at the target while the old module is still loaded."""
    from k3rollout.stages.driver.host import verify_driver

    h = stage_harness(group_vars=DOCKER)
    _verify_script(fake_executor, module="575.57.08")
    ok, why, f = verify_driver(h.ctx("driver_upgrade"), "580.95.05")
    assert not ok and why == "loaded kernel module is 575.57.08, expected 580.95.05"


def test_verify_driver_when_nvidia_smi_cannot_talk_to_the_driver(stage_harness, fake_executor):
    from k3rollout.stages.driver.host import verify_driver

    h = stage_harness(group_vars=DOCKER)
    fake_executor.expect(parsers.GPU_QUERY_ARGV, rc=9, stdout=SMI_FAILED)
    fake_executor.expect(["cat", "/proc/driver/nvidia/version"], rc=1,
                         stderr="cat: /proc/driver/nvidia/version: No such file or directory\n")
    fake_executor.missing(["dkms", "status"])
    fake_executor.expect(["cat", "/proc/driver/nvidia/params"], rc=1,
                         stderr="cat: /proc/driver/nvidia/params: No such file or directory\n")
    fake_executor.expect(["systemctl", "is-active", "nvidia-fabricmanager"], rc=3, stdout="inactive\n")
    fake_executor.expect(parsers.DPKG_ARGV, stdout="")
    ok, why, f = verify_driver(h.ctx("driver_upgrade"), "580.95.05")
    assert not ok and why.startswith("driver is not 580.95.05 after reboot: NVIDIA-SMI has failed")
    assert f["module_version"] is None and f["nvidia_params"] == {} and f["fabricmanager"] == "inactive"
