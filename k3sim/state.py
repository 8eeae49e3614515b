"""Per-host state of a simulated node, kept as JSON in its own directory.

Every command reads and writes the state under an exclusive ``flock`` so concurrent
commands (threads, or processes behind sshd) see a consistent host. ``commands.log``
records each command the host ran, so tests can prove a destructive step ran once.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shlex
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from k3rollout import fastjson
from k3rollout.checks import driver_facts
from k3sim.hostvars import SIM_FAULTS, hardware, initial_scheduler_state
from k3sim.repos import REPO_DRIVERS, initial_packages  # noqa: F401  (REPO_DRIVERS: the repositories' releases)

# Images the simulated registry can pull. CUDA_VERSION / NVIDIA_REQUIRE_CUDA follow the
# nvidia/cuda base images that vLLM's images build on.
REGISTRY = {
    "vllm/vllm-openai:kimi-k3": {
        "id": "sha256:3f1c9a7e2d4b5c6a8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f",
        "digest": "sha256:9b2e6f1d0c3a4b5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6",
        "cuda": "13.0.1", "vllm": "0.23.1", "created": "2026-07-18T09:12:44.118Z",
    },
    "vllm/vllm-openai:v0.11.0": {
        "id": "sha256:a0b1c2d3e4f5061728394a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8f9",
        "digest": "sha256:1d2c3b4a59687f6e5d4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2918071ab",
        "cuda": "12.9.1", "vllm": "0.11.0", "created": "2025-10-02T16:40:03.552Z",
    },
}


# sim_container_runtime's default per scheduler kind (see default_state): Kubernetes nodes are
# containerd nodes, as they are built since dockershim left (docs/domain.md "Workloads on
# Kubernetes GPU nodes"); a node whose inventory says k3_workload_backend: docker is a Docker
# host whatever its scheduler
RUNTIME_DEFAULT = {"kubernetes": "containerd"}

SLURM_CPUS = 224      # CPUTot of the simulated node (2 x 56 cores, 2 threads each)


# the node label the simulated cluster's NVIDIADriver resources select their nodes by (the
# GPU Operator documentation's example uses ``driver.config``; any label works)
GPU_OPERATOR_POOL_LABEL = "driver.config"



def session_user() -> str:
    """Who a simulated host's session (and the simulated slurmctld) runs as without sudo:
    the simulating user, whose processes they are, as a test slurmctld started by hand is."""
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def _site_module_options(hv: dict[str, Any]) -> dict[str, str]:
    """The site's own nvidia module options in /etc/modprobe.d/nvidia-k3.conf. A fresh driver
    sets none: /proc/driver/nvidia/params then reads ``EnableStreamMemOPs: 0`` and
    ``RegistryDwords: ""`` (sim/repos.py ``proc_params``), and DeepEP needs both options set.
    ``sim_nvidia_module_options`` is the ``options nvidia`` line's text; the older
    ``sim_peer_mapping_override`` (true or false) writes ``NVreg_EnableStreamMemOPs=1`` with or
    without ``NVreg_RegistryDwords="PeerMappingOverride=1;"``; neither: no such file."""
    opts = hv.get("sim_nvidia_module_options")
    if opts is None and "sim_peer_mapping_override" in hv:
        opts = "NVreg_EnableStreamMemOPs=1" + (' NVreg_RegistryDwords="PeerMappingOverride=1;"'
                                               if hv.get("sim_peer_mapping_override") else "")
    return {"/etc/modprobe.d/nvidia-k3.conf": f"options nvidia {opts}\n"} if opts else {}

def fabric_manager_fails(state: dict[str, Any]) -> bool:
    """The ``cuda_init_fails`` fault: after the driver upgrade the fabric manager does not
    come up, so CUDA init fails with error 802. On the driver the node had before (a
    rollback restores its fabric manager package with it) the node works as it did."""
    return "cuda_init_fails" in state["faults"] and state["loaded_driver"] != state["original_driver"]


def _sim_job(name: str, hv: dict[str, Any], now: float) -> dict[str, Any]:
    job: dict[str, Any] = {"id": 10000 + zlib.crc32(name.encode()) % 90000,
                           "cpus": int(hv.get("sim_slurm_job_cpus", SLURM_CPUS))}
    if hv.get("sim_slurm_job_after_drain_s"):
        # a job that runs until its work is done, which is this long after the drain
        job["end"], job["after_drain_s"] = now + 86400.0, float(hv["sim_slurm_job_after_drain_s"])
    else:
        job["end"] = now + float(hv["sim_slurm_job_s"])
    return job


def sim_now() -> float:
    """The simulated hosts' wall clock: real time, moved on by ``$K3SIM_CLOCK_OFFSET`` (a
    duration such as ``25h``) so a test or a demo can look at the cluster a day after its run."""
    off = os.environ.get("K3SIM_CLOCK_OFFSET")
    if not off:
        return time.time()
    from k3rollout.model.durations import parse_duration

    return time.time() + parse_duration(off)


# faults that only make sense as events after the run (sim_late_faults): the serving
# container's process is killed once and Docker's restart policy restarts it (docker.crash)
LATE_ONLY_FAULTS = ("serving_crash",)


def late_faults(hv: dict[str, Any], created: float) -> list[dict[str, Any]]:
    """``sim_late_faults``: ``[{fault: cuda_init_fails, after: 12h}]`` (after the host was
    first seen, i.e. the start of the run), ``{fault: ..., at: <unix time>}``, or
    ``{fault: ..., pass: N}`` (from the N-th ``k3rollout observe`` pass of the run on: the
    simulated cluster is told which pass is looking, see ``begin_observation``)."""
    out = []
    for item in hv.get("sim_late_faults") or []:
        when = [k for k in ("after", "at", "pass") if isinstance(item, dict) and k in item]
        if not isinstance(item, dict) or "fault" not in item or len(when) != 1:
            raise ValueError(f"sim_late_faults: each item is {{fault: NAME, after: DURATION}}, {{fault: NAME, at: "
                             f"UNIX_TIME}} or {{fault: NAME, pass: N}}, got {item!r}")
        if item["fault"] not in SIM_FAULTS + LATE_ONLY_FAULTS:
            raise ValueError(f"sim_late_faults: unknown fault {item['fault']!r}; known: "
                             f"{', '.join(SIM_FAULTS + LATE_ONLY_FAULTS)}")
        if "pass" in item:
            n = item["pass"]
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"sim_late_faults: pass is an observation pass number (1, 2, ...), got {item!r}")
            out.append({"fault": str(item["fault"]), "pass": n})
            continue
        if "at" in item:
            at = float(item["at"])
        else:
            from k3rollout.model.durations import parse_duration

            at = created + parse_duration(item["after"])
        out.append({"fault": str(item["fault"]), "at": at})
    return out


def begin_observation(state_dir: Path, index: int) -> None:
    """The controller's ``k3rollout observe`` pass ``index`` is about to look at this host:
    a late fault given as ``pass: N`` starts with pass N (at the pass's first command)."""
    with transaction(state_dir) as state:
        state["observation_pass"] = max(int(state.get("observation_pass", 0)), index)


def _due(f: dict[str, Any], state: dict[str, Any], now: float) -> bool:
    if "pass" in f:
        return int(state.get("observation_pass", 0)) >= f["pass"]
    return f["at"] <= now


def activate_late_faults(state: dict[str, Any], now: float) -> list[str]:
    """A late fault whose time (or observation pass) has come joins the host's faults (and
    the record of its running servers; a fault of the serving process itself shows from the
    server's next start). Returns the faults that started now."""
    due = [f for f in state.get("late_faults", []) if _due(f, state, now)]
    if not due:
        return []
    state["late_faults"] = [f for f in state["late_faults"] if not _due(f, state, now)]
    for f in due:
        if f["fault"] not in state["faults"]:
            state["faults"].append(f["fault"])
        for srv in state["servers"].values():
            if f["fault"] not in srv.setdefault("faults", []):
                srv["faults"].append(f["fault"])
    return [f["fault"] for f in due]


def default_state(name: str, hv: dict[str, Any], address: str | None = None) -> dict[str, Any]:
    driver = str(hardware(hv, "driver"))
    os_family = str(hv.get("ansible_os_family", "Debian"))
    serving_image = str(hv.get("sim_serving_image", "vllm/vllm-openai:v0.11.0"))
    faults = list(hv.get("sim_faults", []))
    # the serving container's launch flags (sim_serving_args; it listens on its --port)
    serving_args = [str(a) for a in hv.get("sim_serving_args") or
                    ["--model", "moonshotai/Kimi-K2-Thinking", "--tensor-parallel-size", "8", "--trust-remote-code",
                     "--port", "8001"]]
    from k3sim.vllm import parse_serve_args

    serving_opts, bad = parse_serve_args(serving_args)
    if bad or serving_opts is None:
        raise ValueError(f"sim_serving_args: {bad}")
    serving_port = int(serving_opts.get("port", 8000))
    images = {}
    for ref in (serving_image, "vllm/vllm-openai:kimi-k3"):
        if ref in REGISTRY:
            images[ref] = dict(REGISTRY[ref])
    now = time.time()
    containers: dict[str, Any] = {
        "vllm-serving": {
            "image": serving_image, "status": "running", "exit_code": 0,
            # docker's restart policy: with "no" a reboot leaves the server down until started
            "restart": str(hv.get("sim_serving_restart", "unless-stopped")),
            "args": serving_args,
            "env": {str(k): str(v) for k, v in (hv.get("sim_serving_env") or {}).items()},
            "started": now - 86400 * 12, "logs": ["INFO:     Application startup complete."],
            "port": serving_port,
        },
    }
    if hv.get("sim_previous_k3_failure", True) and driver.split(".")[0] < "580":
        # The attempt that started this change: the operator tried K3 on r575 with the
        # requirement check bypassed (NVIDIA_DISABLE_REQUIRE), and CUDA init failed.
        containers["kimi-k3"] = {
            "image": "vllm/vllm-openai:kimi-k3", "status": "exited", "exit_code": 1, "restart": "no",
            "args": ["moonshotai/Kimi-K3", "--tensor-parallel-size", "8", "--trust-remote-code"],
            "env": {"NVIDIA_DISABLE_REQUIRE": "true"}, "started": now - 3600 * 5,
            "logs": None, "port": 8000,
        }
    nvswitch = bool(hv.get("sim_nvswitch", int(hardware(hv, "gpu_count")) >= 8))
    state = {
        "name": name,
        "os_family": os_family,
        # the node's package sources and the procedure's facts (sim/repos.py)
        "os_version": str(hv.get("sim_os_version", "22.04" if os_family == "Debian" else "9.5")),
        "driver_source": driver_facts.source_of(hv, os_family),
        "module_stream": driver_facts.module_stream(driver.split(".")[0]) if os_family == "RedHat" else None,
        # held packages: apt-mark holds on Ubuntu, DNF version locks on RHEL (sim/repos.py)
        "holds": list(hv.get("sim_held_packages", [])) if os_family == "Debian" else [],
        "versionlock_plugin": os_family == "RedHat" and bool(hv.get("sim_versionlock_plugin",
                                                                     bool(hv.get("sim_held_packages")))),
        "secure_boot": bool(hv.get("sim_secure_boot", False)),
        "mok_enrolled": bool(hv.get("sim_mok_enrolled", False)),
        "nvswitch": nvswitch,
        "gpu_operator": bool(hv.get("sim_gpu_operator", False)),
        # how long the simulated GPU Operator stays in each upgrade state (sim/kubeapi.py)
        "gpu_operator_state_s": float(hv.get("sim_gpu_operator_state_s", 0.05)),
        "disk_free_gib": int(hv.get("sim_disk_free_gib", 2048)),
        # model weights on local or shared storage: manifest path -> {file: ok|missing|corrupt}
        "weights": dict(hv.get("sim_weights") or {}),
        "headers": bool(hv.get("sim_kernel_headers", True)),
        "fm_installed": bool(hv.get("sim_fabricmanager", True)),
        "fm_version": hv.get("sim_fabricmanager_version"),
        "modprobe_d": {"/etc/modprobe.d/nvidia-graphics-drivers-kms.conf":
                       "# This file was generated by nvidia-driver-575\noptions nvidia-drm modeset=1\n",
                       **_site_module_options(hv)},
        # services that hold /dev/nvidia*: a module unload fails until they stop
        # (sim_device_plugin: the Kubernetes device plugin as a host systemd unit, as on AKS)
        "services": {u: {"enabled": True, "active": True, "failed": False}
                     for u in (["nvidia-fabricmanager"] if nvswitch else []) + ["nvidia-persistenced", "nvidia-dcgm"]
                     + (["nvidia-device-plugin"] if hv.get("sim_device_plugin") else [])},
        "kernel": str(hv.get("sim_kernel", "6.8.0-45-generic" if os_family == "Debian" else "5.14.0-503.el9.x86_64")),
        "gpu": {"model": str(hardware(hv, "gpu_model")), "count": int(hardware(hv, "gpu_count")),
                "mem_gib": int(hardware(hv, "gpu_mem_gib"))},
        "faults": faults,
        # faults that appear after the run (sim_late_faults): each joins ``faults`` once the
        # host's clock passes its time
        "late_faults": late_faults(hv, now),
        "latency_s": float(hv.get("sim_latency_s", 0.0)),
        "reboot_s": float(hv.get("sim_reboot_s", 0.05)),
        "slow_reboot_s": float(hv.get("sim_slow_reboot_s", 2.0)),
        "packages": {},                    # filled below from the node's repositories (sim/repos.py)
        "module_version": driver,          # what DKMS built for the running kernel
        "module_signed": True,             # the running module loads, so it passed Secure Boot
        "loaded_driver": driver,           # the kernel module in memory
        "original_driver": driver,
        "boot_id": str(uuid.uuid4()),
        "down_until": 0.0,
        "dead": False,
        "boots": 0,
        # the Slurm site's container launcher (k3_container_launcher, pyxis when unset, as the
        # workload backend takes it): its jobs' containers run in this node's container model;
        # docker answers only where it is docker
        "container_launcher": str(hv.get("k3_container_launcher") or
                                  ("pyxis" if hv.get("scheduler") == "slurm" else "docker")),
        "launcher_missing": bool(hv.get("sim_launcher_missing", False)),     # not installed on the node
        "scheduler": {"kind": str(hv.get("scheduler", "kubernetes")),
                      "state": initial_scheduler_state(hv),
                      # a GPU Operator node is in the NVIDIADriver pool its label names
                      **({"labels": {GPU_OPERATOR_POOL_LABEL: str(hv.get("sim_gpu_operator_pool", "r575"))}}
                         if hv.get("sim_gpu_operator") else {}),
                      # Slurm jobs running on the node: sim_slurm_job_s holds it that long from
                      # now, sim_slurm_job_after_drain_s until that long after a drain is asked
                      # for, on sim_slurm_job_cpus of its CPUs (all: ALLOCATED, some: MIXED)
                      "jobs": [_sim_job(name, hv, now)]
                      if hv.get("sim_slurm_job_s") or hv.get("sim_slurm_job_after_drain_s") else []},
        "docker": {"nvidia_runtime": "container_runtime_missing" not in faults, "images": images,
                   "containers": containers},
        # what listens where: the daemon in sim/netd.py serves these on ``address``
        "address": address,
        "token_s": float(hv.get("sim_token_s", 0.002)),   # one decode step of the simulated vLLM
        "servers": {str(serving_port): {"container": "vllm-serving", "status": "running", "faults": [],
                                        "instance": uuid.uuid4().hex,
                                        "opts": {**serving_opts, "port": serving_port,
                                                 "_vllm_version": REGISTRY.get(serving_image, {}).get("vllm",
                                                                                                      "0.11.0")}}},
        "dropped": [],
        "sudo_password": hv.get("sim_sudo_password"),
    }
    # the node's container runtime (sim_container_runtime): "docker", a Docker host whose
    # serving container stands for its pod; or "containerd", a Kubernetes node as they are built
    # since dockershim left: no docker CLI, crictl and the CRI image store (k8s.io namespace),
    # and its workloads are Pods a simulated kubelet runs (sim/kubelet.py). The default follows
    # the node's workload backend: docker where the inventory asks for it, else RUNTIME_DEFAULT.
    if hv.get("k3_workload_backend") == "docker":
        runtime_default = "docker"
    else:
        runtime_default = RUNTIME_DEFAULT.get(str(hv.get("scheduler", "kubernetes")), "docker")
    runtime = str(hv.get("sim_container_runtime", runtime_default))
    if runtime not in ("docker", "containerd"):
        raise ValueError(f"sim_container_runtime: docker or containerd, got {runtime!r}")
    state["container_runtime"] = runtime
    state["crash_backoff_s"] = float(hv.get("sim_crash_backoff_s", 10.0))
    # rights the cluster's API server refuses to every user (sim_k8s_deny: "VERB RESOURCE" or
    # "VERB RESOURCE/SUBRESOURCE", as RBAC names them): a cluster setting, the union over the
    # hosts, taken by the API server when it first meets the nodes (sim/kubeseed.py)
    deny = hv.get("sim_k8s_deny") or []
    if not isinstance(deny, list) or not all(isinstance(d, str) and len(d.split()) == 2 for d in deny):
        raise ValueError(f'sim_k8s_deny: a list of "VERB RESOURCE[/SUBRESOURCE]" rights, got {deny!r}')
    state["k8s_deny"] = [" ".join(d.split()) for d in deny]
    state["cri"] = {"images": {}, "containers": {}}
    if runtime == "containerd":
        # what runs is the pods' (the API server seeds them: sim/kubeseed.py from sim_k8s_serving);
        # the containers the Docker host would run are the seed's template and its failed attempt
        state["k8s_seed"] = {"serving": containers["vllm-serving"], "failed": containers.get("kimi-k3"),
                             "workload": hv.get("sim_k8s_serving")}
        state["docker"]["containers"], state["servers"] = {}, {}
        state["cri"]["images"] = {f"docker.io/{ref}": img for ref, img in images.items()}
    state["packages"] = initial_packages(state, driver)
    if os_family == "RedHat":
        from k3sim.repos import lock_spec

        state["version_locks"] = [x for x in (lock_spec(state, n) for n in hv.get("sim_held_packages", [])) if x]
    from k3sim.repos import on_boot

    on_boot(state)                         # services as they came up at the last boot
    return state



def init_host(state_dir: Path, name: str, host_vars: dict[str, Any]) -> Path:
    """Create the host's state directory if it does not exist yet (never resets a host)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "state.json"
    with locked(state_dir):
        if not path.exists():
            from k3sim.netd import allocate

            address = str(host_vars.get("sim_address") or allocate(state_dir.parent))
            _write(state_dir, default_state(name, host_vars, address))
    return state_dir


@contextlib.contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    fd = os.open(f"{state_dir}/.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _read(state_dir: Path) -> bytes:
    fd = os.open(f"{state_dir}/state.json", os.O_RDONLY)
    try:
        chunks = []
        while True:
            got = os.read(fd, 1 << 16)
            if not got:
                return b"".join(chunks)
            chunks.append(got)
    finally:
        os.close(fd)


# a read that raced two writes is read again, this many times in all
LOAD_TRIES = 50


def load(state_dir: Path) -> dict[str, Any]:
    """The host's state, read without the lock. A write swaps its new file in (``_exchange``),
    and the next write truncates the old inode to fill it again: a reader that opened the old
    file before the swap can find it truncated or half rewritten by that second write. Such a
    read does not parse, and is made again from the name, which always holds a whole file."""
    for attempt in range(1, LOAD_TRIES):
        try:
            return fastjson.loads(_read(state_dir))
        except ValueError:
            time.sleep(0.001 * attempt)
    return fastjson.loads(_read(state_dir))


def _load_renameat2() -> Callable[[bytes, bytes], int] | None:
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return lambda a, b: fn(_AT_FDCWD, a, _AT_FDCWD, b, _RENAME_EXCHANGE)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_RENAMEAT2 = _load_renameat2()


def _exchange(tmp: str, path: str) -> bool:
    """Swap two files atomically (``renameat2(RENAME_EXCHANGE)``): the new state takes the
    name, the old one becomes the next write's scratch file. No inode is freed, so the
    thousands of state changes of a large simulated rollout leave no trail of just-deleted
    inodes (on ext4 without a journal every new file's inode allocation walks past each
    inode freed in the last minutes, which made the run's evidence files several times
    dearer to create). False where the call or the file system lacks it."""
    if _RENAMEAT2 is None:
        return False
    return _RENAMEAT2(os.fsencode(tmp), os.fsencode(path)) == 0


def _write(state_dir: Path, state: dict[str, Any], data: bytes | None = None) -> None:
    tmp = f"{state_dir}/state.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(fastjson.dumps(state) if data is None else data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    path = f"{state_dir}/state.json"
    if not _exchange(tmp, path):
        os.replace(tmp, path)


@contextlib.contextmanager
def transaction(state_dir: Path) -> Iterator[dict[str, Any]]:
    with locked(state_dir):
        raw = _read(state_dir)
        state = fastjson.loads(raw)
        yield state
        after = fastjson.dumps(state)
        if after != raw:           # read-only commands leave the file alone
            _write(state_dir, state, after)


@contextlib.contextmanager
def try_transaction(state_dir: Path, wait_s: float) -> Iterator[dict[str, Any] | None]:
    """``transaction`` on another host's state, taken while this host's own is held: it
    waits at most ``wait_s`` for the lock (two hosts asking each other cannot deadlock) and
    yields None if it could not be had."""
    fd = os.open(f"{state_dir}/.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield None
                    return
                time.sleep(0.005)
        try:
            raw = _read(state_dir)
            state = fastjson.loads(raw)
            yield state
            after = fastjson.dumps(state)
            if after != raw:
                _write(state_dir, state, after)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def log_command(state_dir: Path, argv: list[str]) -> None:
    fd = os.open(f"{state_dir}/commands.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{time.time():.6f} {shlex.join(argv)}\n".encode("utf-8", "backslashreplace"))
    finally:
        os.close(fd)


def executed(state_dir: Path) -> list[str]:
    """The commands this host ran, in order (without timestamps)."""
    try:
        lines = (state_dir / "commands.log").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [ln.split(" ", 1)[1] for ln in lines if " " in ln]


def is_up(state: dict[str, Any], now: float) -> bool:
    return not state["dead"] and now >= state["down_until"]
