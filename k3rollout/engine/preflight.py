"""``k3rollout preflight``: read-only checks on every node of the play, before the window.

It answers, per node, before anyone books a window: would the driver stage work here, and
could its rollback work? Nothing is changed on any node: every command is a query
(``apt-cache madison``, ``dnf repoquery``, ``mokutil --sb-state``, ``nvidia-smi``, ``df``...).
The checks:

- ``connect``: the controller reaches the node with its credentials (and sudo, when the
  inventory asks for it);
- ``workload``: the node's workload runtime (``k3_workload_backend``) can work there: for
  ``docker``, the docker CLI and daemon answer (a Kubernetes node with containerd and no
  docker is refused, naming the var to set);
- ``controller_tools``: what the run will execute on the controller (ansible-playbook and
  ansible-runner for vendor task files over SSH);
- ``gpu_count``: nvidia-smi shows ``expected_gpu_count`` GPUs;
- ``gpu_operator``: the node's driver is not managed by the GPU Operator (its driver
  container owns /run/nvidia/driver; a host package install would fight it), or, for a node
  with ``k3_driver_backend: gpu-operator``, that it is (then the package checks below,
  which concern host packages, are not made);
- ``target_packages``: the node's repositories offer the target driver for every package
  of its vendor path (all DNF module streams considered: the stream is switched later);
- ``rollback_packages``: every NVIDIA package installed now is still downloadable at exactly
  its version. Otherwise the node's rollback is impossible (an ``-updates`` pocket keeps only
  the newest version; a pruned mirror);
- ``fabric_manager``: on NVSwitch systems the fabric manager package is installed (and the
  target's is offered, under ``target_packages``);
- ``secure_boot``: Secure Boot on with a DKMS path whose signing key is not enrolled (the
  new module would not load);
- ``disk``: free space for the target image (when not cached) and the weights.

The report (JSON and Markdown) names each failed check; the exit code is 1 when a node or
the controller fails. ``run`` performs the same preflight and refuses to start unless each
failed node is named with ``--skip-node`` (then left out of the run, and the run records it).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from k3rollout import fastjson
from k3rollout.checks import driver_facts as df
from k3rollout.checks import parsers
from k3rollout.stages import driver_node as dn
from k3rollout.transport.base import CommandResult
from k3rollout.workload import workload_for

DEFAULT_IMAGE_GIB = 30          # a vLLM CUDA 13 image, unpacked
DEFAULT_WEIGHTS_GIB = 600       # Kimi K3 checkpoint on local disk (override with weights_disk_gib)


class _Unreachable(Exception):
    pass


def _runner(executor: Any, host: str, log: list[dict[str, Any]]):
    def run(name: str, argv: list[str]) -> CommandResult:
        from k3rollout.errors import K3RolloutError

        try:
            res = executor.run(host, argv, timeout=120.0)
        except K3RolloutError as exc:
            raise _Unreachable(str(exc).splitlines()[0]) from None
        log.append({"name": name, "argv": list(argv), "rc": res.rc, "stdout": res.stdout[-4000:],
                    "stderr": res.stderr[-2000:]})
        return res
    return run


def check_node(executor: Any, host: str, hvars: dict[str, Any], target: str) -> dict[str, Any]:
    log: list[dict[str, Any]] = []
    run = _runner(executor, host, log)
    checks: list[dict[str, Any]] = []

    def add(check: str, ok: bool, detail: str) -> None:
        checks.append({"check": check, "ok": ok, "detail": detail})

    info: dict[str, Any] = {}
    try:
        who = run("connect", ["true"])
        if not who.ok:
            add("connect", False, f"the node refused a command (rc {who.rc}): {who.tail(200)}")
            return {"ok": False, "checks": checks, "info": info, "commands": log}
        add("connect", True, "reached with the inventory's credentials")
        # the workload runtime first: a backend that cannot run here refuses the node before
        # anything else is asked of it (and before any change, when `run` performs this)
        add("workload", *workload_for(hvars).preflight(run, hvars))
        if not checks[-1]["ok"]:
            return {"ok": False, "checks": checks, "info": info, "commands": log}
        os_ = dn.read_os(run)
        info.update(os_)
        try:
            source = df.source_of(hvars, os_["os_family"])
        except ValueError as exc:
            add("target_packages", False, str(exc))
            return {"ok": False, "checks": checks, "info": info, "commands": log}
        info["driver_source"] = source
        mgr = df.pkg_mgr(source)
        if mgr != os_["pkg_mgr"]:
            add("target_packages", False, f"nvidia_driver_source {source} does not fit this {os_['os_family']} node")
            return {"ok": False, "checks": checks, "info": info, "commands": log}

        smi = run("nvidia-smi", parsers.GPU_QUERY_ARGV)
        expected = int(hvars.get("expected_gpu_count", 8))
        if smi.ok:
            g = parsers.gpu_facts(parsers.parse_gpu_query(smi.stdout))
            info["driver_version"] = g["driver_version"]
            add("gpu_count", g["gpu_count"] == expected, f"{g['gpu_count']} GPUs, expected {expected}")
        else:
            add("gpu_count", False, f"nvidia-smi fails (rc {smi.rc}): {smi.tail(200)}")

        op = run("gpu-operator", df.GPU_OPERATOR_PROBE)
        if hvars.get("k3_driver_backend") == "gpu-operator":
            # the driver is the operator's container, changed by a pool label: no host
            # package is installed or restored, so none is queried
            add("gpu_operator", op.ok, "the GPU Operator's driver container owns this node's driver: upgraded "
                                       f"through its NVIDIADriver pool {hvars.get('k3_gpu_operator_pool_label')}="
                                       f"{hvars.get('k3_gpu_operator_pool')}" if op.ok else
                "k3_driver_backend is gpu-operator, but no GPU Operator driver container runs here "
                "(/run/nvidia/driver)")
            add("disk", *_disk(run, hvars))
            return {"ok": all(c["ok"] for c in checks), "checks": checks, "info": info, "commands": log}
        add("gpu_operator", not op.ok, "the GPU Operator's driver container owns this node's driver "
                                       "(/run/nvidia/driver): upgrade it through the ClusterPolicy, not host "
                                       "packages" if op.ok else "host-installed driver")

        fabric = dn.nvswitch(run)
        info["nvswitch"] = fabric
        want = dn.resolve_target(run, source, target, os_["kernel"], fabric, all_streams=True)
        info["target_install"] = want["install"]
        add("target_packages", not want["missing"],
            f"not offered for {target}: {', '.join(want['missing'])}" if want["missing"]
            else f"{len(want['pins'])} packages offered for {target}")

        argv = parsers.RPM_ARGV if mgr == "dnf" else parsers.DPKG_ARGV
        pk = run("installed-packages", argv)
        installed = [p for p in parsers.parse_packages(pk.stdout) if p["status"].startswith("ii")]
        if mgr == "apt":
            # Canonical's precompiled module packages: the rollback restores them too
            mods = run("precompiled-modules", parsers.DPKG_MODULES_ARGV)
            installed += [p for p in parsers.parse_packages(mods.stdout) if p["status"].startswith("ii")]
        info["installed_driver_packages"] = installed
        gone, origins = dn.baseline_downloadable(run, source, installed)
        info["origins"] = origins
        add("rollback_packages", not gone,
            ("no longer downloadable, so this node's rollback is impossible: " + ", ".join(gone)) if gone
            else f"all {len(installed)} installed NVIDIA packages are still downloadable")

        if fabric:
            branch = (info.get("driver_version") or "").split(".")[0]
            fm_names = [p["name"] for p in installed if "fabric" in p["name"]]
            add("fabric_manager", bool(fm_names),
                f"installed: {', '.join(fm_names)}" if fm_names else
                f"NVSwitch system without a fabric manager package ({df.fabricmanager(source, branch or 580)}): "
                "CUDA fails with error 802")

        sb = dn.secure_boot(run)
        info.update(sb)
        unsigned = bool(sb.get("secure_boot")) and df.uses_dkms(source) and not sb.get("mok_enrolled")
        add("secure_boot", not unsigned,
            "Secure Boot is on and the DKMS module would be signed with a MOK key that is not enrolled: it would "
            "not load. Enroll the key or use nvidia_driver_source: ubuntu-archive-precompiled" if unsigned else
            ("Secure Boot on, module signing in place" if sb.get("secure_boot") else "Secure Boot off"))

        info["held_packages"] = dn.holds(run, mgr)
        if mgr == "dnf":
            info["driver_module_stream"] = dn.module_stream(run)
        add("disk", *_disk(run, hvars))
    except _Unreachable as exc:
        add("connect", False, f"cannot reach the node: {exc}")
    except parsers.ParseError as exc:
        add("parse", False, str(exc))
    return {"ok": all(c["ok"] for c in checks), "checks": checks, "info": info, "commands": log}


def _disk(run: Any, hvars: dict[str, Any]) -> tuple[bool, str]:
    image_gib = float(hvars.get("image_disk_gib", DEFAULT_IMAGE_GIB))
    weights_gib = float(hvars.get("weights_disk_gib", DEFAULT_WEIGHTS_GIB))
    wl = workload_for(hvars)
    weights_dir = str(hvars.get("weights_dir", "/root/.cache/huggingface"))
    cached = wl.image_cached(run, str(hvars["vllm_image"])) if hvars.get("vllm_image") else False
    res = run("disk", ["df", "-B1", "--output=target,avail", wl.image_store(run, hvars), weights_dir])
    rows = [ln.split() for ln in res.stdout.splitlines()[1:] if len(ln.split()) == 2]
    if not res.ok or len(rows) != 2:
        return False, f"df failed (rc {res.rc}): {res.tail(200)}"
    need: dict[str, float] = {}
    avail: dict[str, float] = {}
    for (mount, free), gib in zip(rows, (0.0 if cached else image_gib, weights_gib), strict=False):
        need[mount] = need.get(mount, 0.0) + gib
        avail[mount] = int(free) / 1024 ** 3
    short = [f"{m}: {avail[m]:.0f} GiB free, {need[m]:.0f} GiB needed" for m in need if avail[m] < need[m]]
    if short:
        return False, "not enough disk for the image and weights: " + "; ".join(short)
    return True, "; ".join(f"{m}: {avail[m]:.0f} GiB free, {need[m]:.0f} GiB needed" for m in need)


def preflight(playbook: Any, inventory: Any, hosts: list[str], executor: Any, *,
              controller: dict[str, Any], forks: int = 16) -> dict[str, Any]:
    """Every node in parallel (read-only); the report as a dict."""
    target, tvars = target_of(playbook)

    def one(h: str) -> tuple[str, dict[str, Any]]:
        hv = {**inventory.hosts[h].vars, **tvars}      # play vars win, as in Ansible
        return h, check_node(executor, h, hv, target)

    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(hosts) or 1))) as pool:
        nodes = dict(pool.map(one, hosts))
    failed = [h for h in hosts if not nodes[h]["ok"]]
    return {"target_driver": target, "controller": controller, "nodes": nodes, "failed_nodes": failed,
            "ok": controller.get("ok", True) and not failed}


def target_of(playbook: Any) -> tuple[str, dict[str, Any]]:
    from k3rollout.model.assertions import render

    tvars = dict(playbook.play.vars)
    target = str(tvars.get("target_driver", ""))
    for s in playbook.stages:
        if s.stage == "driver_upgrade":
            target = str(render(str(s.typed_params().target_driver), tvars))
    return target, tvars


def controller_check(playbook: Any, inventory: Any, hosts: list[str], executor: Any = None) -> dict[str, Any]:
    """The controller's tools, its Kubernetes credentials (read-only access reviews: read
    nodes and pods, patch nodes, create evictions, hold the cluster's Lease), and, for Slurm
    nodes, the right to create the reservation that is the cluster lock
    (scheduler/slurm_access.py)."""
    from k3rollout.errors import InputError
    from k3rollout.scheduler.k8s_access import check_access
    from k3rollout.scheduler.slurm_access import check_slurm_access
    from k3rollout.transport.factory import check_controller_tools

    try:
        tools = check_controller_tools(playbook, {h: inventory.hosts[h] for h in hosts})
        access = check_access({h: inventory.hosts[h] for h in hosts}, inventory.path, executor)
    except InputError as exc:
        return {"ok": False, "detail": str(exc)}
    slurm = check_slurm_access(inventory, hosts, executor)
    detail = ", ".join(f"{k}: {v}" for k, v in tools.items()) or "nothing beyond k3rollout"
    for a in access:
        missing = [f"{c['verb']} {c['resource']} ({c['for']})" for c in a["checks"] if not c["allowed"]]
        detail += (f"; Kubernetes API {a['server']}: " + (f"credentials lack: {', '.join(missing)}" if missing
                                                          else "credentials can cordon, evict and hold the Lease"))
    for s in slurm:
        detail += f"; Slurm: {s['detail']}"
    return {"ok": all(a["ok"] for a in access) and all(s["ok"] for s in slurm), "detail": detail,
            "kubernetes_access": access, **({"slurm_access": slurm} if slurm else {})}


def write_report(report: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    jpath, mpath = out_dir / "preflight.json", out_dir / "preflight.md"
    # orjson, laid out as json.dumps(indent=2) does: at 1,000 nodes the standard library's
    # indented encoder took seconds before the run could start
    jpath.write_text(fastjson.dumps_pretty(report) + "\n", encoding="utf-8")
    mpath.write_text(render_md(report), encoding="utf-8")
    return jpath, mpath


def render_md(report: dict[str, Any]) -> str:
    lines = [f"# Preflight: driver {report['target_driver']}", "",
             f"**{'PASSED' if report['ok'] else 'FAILED'}**: {len(report['nodes'])} node(s), "
             f"{len(report['failed_nodes'])} would fail"
             + (f" ({', '.join(report['failed_nodes'])})" if report["failed_nodes"] else ""), "",
             f"Controller: {'ok' if report['controller'].get('ok', True) else 'FAILED'}: "
             f"{report['controller'].get('detail', '')}", ""]
    if report.get("skipped_nodes"):
        lines += ["Left out of the run with --skip-node: " + ", ".join(report["skipped_nodes"]), ""]
    lines += ["| node | check | result | detail |", "|---|---|---|---|"]
    for h, n in report["nodes"].items():
        for c in n["checks"]:
            lines.append(f"| {h} | {c['check']} | {'ok' if c['ok'] else '**FAIL**'} | "
                         f"{c['detail'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def summary_lines(report: dict[str, Any]) -> list[str]:
    out = []
    if not report["controller"].get("ok", True):
        out.append(f"controller: FAIL {report['controller']['detail']}")
    for h in report["failed_nodes"]:
        for c in report["nodes"][h]["checks"]:
            if not c["ok"]:
                out.append(f"{h}: {c['check']}: {c['detail']}")
    return out
