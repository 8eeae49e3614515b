"""``k3rollout preflight``: read-only checks on every node of the play, before the window.

It answers, per node, before anyone books a window: would the driver stage work here, and
could its rollback work? Nothing is changed on any node: every command is a query
(``apt-cache madison``, ``dnf repoquery``, ``mokutil --sb-state``, ``nvidia-smi``, ``df``...).
The checks:

- ``connect``: the controller reaches the node with its credentials (and sudo, when the
  inventory asks for it);
- ``workload``: the node's workload runtime (``k3_workload_backend``) can work there: for
  ``docker``, the docker CLI and daemon answer (a Kubernetes node with containerd and no
  docker is refused, naming the var to set); then, from the controller through the API of
  a node under ``scheduler: kubernetes``, what the backend needs of the cluster
  (``workload_runtime``: the kubelet runs Docker, for ``docker``; ``workload_node``,
  ``workload_namespace``, ``workload_owners`` for ``kubernetes``);
- ``controller_tools``: what the run will execute on the controller (ansible-playbook and
  ansible-runner for vendor task files over SSH);
- ``gpu_count``: nvidia-smi shows ``expected_gpu_count`` GPUs;
- ``gpu_operator``: the node's driver is not managed by the GPU Operator (its driver
  container owns /run/nvidia/driver; a host package install would fight it), or, for a node
  with ``k3_driver_backend: gpu-operator``, that it is (then the package checks below,
  which concern host packages, are not made);
- ``no_change``: the node is already on the target driver, or past it, so the play leaves it
  alone (plan/target.py, the rule plan and run apply too): none of the checks below is made;
- ``target_packages``: the node's repositories offer the target driver for every package
  of its vendor path (all DNF module streams considered: the stream is switched later);
- ``rollback_packages``: every NVIDIA package installed now is still downloadable at exactly
  its version. Otherwise the node's rollback is impossible (an ``-updates`` pocket keeps only
  the newest version; a pruned mirror);
- ``ansible``: where the driver stage runs vendor task files through Ansible (over SSH), a
  read-only Ansible task (``ansible.builtin.ping``) runs on the node with the inventory's own
  connection variables (interpreter, user, become), so a node Ansible cannot work on is
  refused before its drain, naming the variable to check;
- ``fabric_manager``: on NVSwitch systems the fabric manager package is installed (and the
  target's is offered, under ``target_packages``);
- ``secure_boot``: Secure Boot on with a DKMS path whose signing key is not enrolled (the
  new module would not load);
- ``disk``: free space for the target image (when not cached) and the weights.

The playbook's baseline ``workload_probes`` must each match a serving pod or its owner on
some node of the play (where every node lists them). The report (JSON and Markdown) names each
failed check; the exit code is 1 when a node, the controller or the playbook fails, and 2 when
a failure is the input's (``"input": true``: a backend that does not fit the node, a missing
Kubernetes right, a namespace or owner that does not exist, a probe that names no workload).
``run`` performs the same preflight and refuses to start (with the same exit code) unless each
failed node is named with ``--skip-node`` (then left out of the run, and the run records it).
"""

from __future__ import annotations

import fnmatch
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from k3rollout import fastjson
from k3rollout.checks import driver_facts as df
from k3rollout.checks import parsers
from k3rollout.engine.k8s_access import check_access
from k3rollout.engine.pool import run_each
from k3rollout.errors import InputError, K3RolloutError
from k3rollout.model.playbook import STAGE_TABLES
from k3rollout.model.stagekinds import RECORDS_BASELINE
from k3rollout.plan.target import changes_driver, no_change_reason, target_of
from k3rollout.runlog.rundir import RunDir
from k3rollout.scheduler import scheduler_for
from k3rollout.scheduler.k8s_api import KubernetesApi, kubeconfig_for
from k3rollout.scheduler.slurm_access import check_slurm_access
from k3rollout.stages import driver_node as dn
from k3rollout.stages.driver import driver_backend_for
from k3rollout.toolpaths import require_tool
from k3rollout.transport.base import CommandResult, Executor
from k3rollout.transport.factory import check_controller_tools
from k3rollout.workload import workload_for

DEFAULT_IMAGE_GIB = 30          # a vLLM CUDA 13 image, unpacked
DEFAULT_WEIGHTS_GIB = 600       # Kimi K3 checkpoint on local disk (override with weights_disk_gib)


class _Unreachable(Exception):
    pass


def _runner(executor: Executor, host: str, log: list[dict[str, Any]]) -> Callable[[str, list[str]], CommandResult]:
    def run(name: str, argv: list[str]) -> CommandResult:
        try:
            res = executor.run(host, argv, timeout=120.0)
        except K3RolloutError as exc:
            raise _Unreachable(str(exc).splitlines()[0]) from None
        log.append({"name": name, "argv": list(argv), "rc": res.rc, "stdout": res.stdout[-4000:],
                    "stderr": res.stderr[-2000:]})
        return res
    return run


def check_node(executor: Any, host: str, hvars: dict[str, Any], target: str, *,
               changes_driver: bool = True, ansible_tasks: dict[str, str] | None = None,
               kube: Callable[[], Any] | None = None) -> dict[str, Any]:
    """``ansible_tasks``: the driver stage's vendor task files by package manager; over SSH
    they run through Ansible, so its path is proved on the node (check ``ansible``).
    ``kube``: the Kubernetes API of a node under ``scheduler: kubernetes`` (None for any
    other), for a workload backend that asks it."""
    log: list[dict[str, Any]] = []
    run = _runner(executor, host, log)
    checks: list[dict[str, Any]] = []

    def add(check: str, ok: bool, detail: str, bad_input: bool = False) -> None:
        # bad_input: the inventory, the credentials or the playbook must change (exit 2)
        checks.append({"check": check, "ok": ok, "detail": detail, **({"input": True} if bad_input else {})})

    info: dict[str, Any] = {}
    try:
        who = run("connect", ["true"])
        if not who.ok:
            add("connect", False, f"the node refused a command (rc {who.rc}): {who.tail(200)}")
            return {"ok": False, "checks": checks, "info": info, "commands": log}
        add("connect", True, "reached with the inventory's credentials")
        # the workload runtime first: a backend that cannot run here refuses the node before
        # anything else is asked of it (and before any change, when `run` performs this)
        wl = workload_for(hvars)
        add("workload", *wl.preflight(run, hvars))
        if not checks[-1]["ok"]:
            return {"ok": False, "checks": checks, "info": info, "commands": log}
        api = wl.preflight_api(kube, host, hvars)
        for name, verdict in api.checks:
            add(name, *verdict)
        if api.serving is not None:
            info["serving_workloads"] = api.serving
        if not all(c["ok"] for c in checks):
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
        driver = driver_backend_for(hvars)
        add("gpu_operator", *driver.preflight_owner(op.ok, hvars))
        # the run's rule (plan/target.py): a node already on the target, or past it, is left
        # alone after its baseline, so nothing about its change or rollback is checked
        unchanged = no_change_reason(info.get("driver_version"), target) if changes_driver else None
        if unchanged:
            info["no_change"] = unchanged
            add("no_change", True, f"{unchanged}; no change or rollback checks, the node stays in service")
            return {"ok": all(c["ok"] for c in checks), "checks": checks, "info": info, "commands": log}
        # what the node's driver backend needs of it, to change it and to put it back
        ansible = None
        if (ansible_tasks or {}).get(mgr) and getattr(executor, "kind", "") == "ssh":
            def ansible() -> tuple[bool, str]:
                return _ansible_path(executor, host, hvars, log)
        for check in driver.preflight(run, hvars, target, source, os_, info, ansible):
            add(*check)
        add("disk", *_disk(run, hvars))
    except _Unreachable as exc:
        add("connect", False, f"cannot reach the node: {exc}")
    except parsers.ParseError as exc:
        add("parse", False, str(exc))
    return {"ok": all(c["ok"] for c in checks), "checks": checks, "info": info, "commands": log}


def _ansible_path(executor: Any, host: str, hvars: dict[str, Any], log: list[dict[str, Any]]) -> tuple[bool, str]:
    """A read-only Ansible task (ping: log in, become, run a Python module) with the inventory's
    own connection variables, as the driver stage's vendor task files will run: a node where
    it fails would fail its install at the first task, after its drain."""
    from k3rollout.transport import ansible as ansible_transport  # lazy: paramiko, for SSH runs only

    if not ansible_transport.available():
        return False, "ansible-runner cannot be imported on the controller; install k3rollout with its dependencies"
    try:
        binary = require_tool("ansible-playbook", "the driver stage runs its vendor task files with ansible-runner")
    except K3RolloutError as exc:
        return False, str(exc)
    private = Path(tempfile.mkdtemp(prefix="k3preflight-"))
    try:
        res = ansible_transport.ping(executor.targets[host], hvars, private, timeout=120.0, binary=binary)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    failed = [e for e in res.events if e["event"] in ("runner_on_failed", "runner_on_unreachable")]
    said = str(next((e.get("msg") or e.get("stderr") for e in failed if e.get("msg") or e.get("stderr")), "")
               or res.stdout[-300:]).strip()
    log.append({"name": "ansible-ping", "argv": ["ansible-playbook", "(ansible.builtin.ping)"], "rc": res.rc,
                "stdout": res.stdout[-4000:], "stderr": said[-2000:]})
    if res.rc == 0 and not failed:
        return True, "Ansible runs modules here with the inventory's connection variables (ansible.builtin.ping)"
    return False, (f"Ansible cannot run the vendor task files on this node ({said[:300] or f'rc {res.rc}'}): "
                   f"{_ansible_hint(said, hvars, bool(res.unreachable))}. Nothing was changed")


def _ansible_hint(said: str, hvars: dict[str, Any], unreachable: bool) -> str:
    """The inventory variables behind an Ansible failure, named so the operator can fix them."""
    low = said.lower()
    if "interpreter" in low or "python" in low:
        have = hvars.get("ansible_python_interpreter")
        return (f"check ansible_python_interpreter (the inventory sets {have!r})" if have else
                "set ansible_python_interpreter to the node's Python 3")
    if any(w in low for w in ("sudo", "become", "privilege")):
        return "check ansible_become, ansible_become_user and ansible_become_password"
    if unreachable:
        return ("check ansible_host, ansible_port, ansible_user and ansible_ssh_private_key_file (and ssh_config, "
                "ansible.cfg) for the connection the vendor tasks use")
    return "check the inventory's ansible_* connection variables for this node"


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
    changes = changes_driver(playbook)
    tasks: dict[str, str] = {}
    for s in playbook.stages:
        if s.stage == "driver_upgrade":
            tasks = {m: f for m in ("apt", "dnf") if (f := getattr(s.typed_params().tasks, m, None))}
    apis: dict[tuple[str | None, str | None], KubernetesApi] = {}
    lock = threading.Lock()

    def one(h: str) -> tuple[str, dict[str, Any]]:
        hv = {**inventory.hosts[h].vars, **tvars}      # play vars win, as in Ansible

        def kube() -> KubernetesApi:
            key = kubeconfig_for(hv, inventory.path, executor)
            with lock:
                if key not in apis:
                    apis[key] = KubernetesApi(*key)
                return apis[key]

        return h, check_node(executor, h, hv, target, changes_driver=changes, ansible_tasks=tasks,
                             kube=kube if scheduler_for(hv).kind == "kubernetes" else None)

    try:
        # the engine's worker pool (engine/pool.py): Ctrl-C starts no further node's checks
        nodes = dict(run_each(one, hosts, workers=forks, name="k3preflight"))
    finally:
        for api in apis.values():
            api.close()
    failed = [h for h in hosts if not nodes[h]["ok"]]
    play = probes_check(playbook, nodes)
    return {"target_driver": target, "controller": controller, "nodes": nodes, "failed_nodes": failed,
            "no_change_nodes": {h: nodes[h]["info"]["no_change"] for h in hosts if nodes[h]["info"].get("no_change")},
            "play": play, "ok": controller.get("ok", True) and not failed and play["ok"]}


def probes_check(playbook: Any, nodes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The playbook's ``workload_probes`` each match a serving workload or its owner on some
    node of the play: a pattern that matches none names an owner that does not exist (a typo,
    another cluster's), and the probe the operator declared would silently never run. Made
    only where every node listed its serving workloads (the kubernetes backend, through the
    API); a mismatch is the playbook's (bad input)."""
    specs = [(s.name, i, p.match) for s in playbook.stages if STAGE_TABLES.plays(s.stage, RECORDS_BASELINE)
             for i, p in enumerate(s.typed_params().workload_probes)]
    seen = [n["info"].get("serving_workloads") for n in nodes.values()]
    if not specs or not nodes or any(s is None for s in seen):
        return {"ok": True, "detail": "no workload_probes to match" if not specs else
                "workload_probes not matched before the run: not every node lists its serving workloads"}
    names = sorted({n for s in seen for n in s or []})
    bad = [(stage, i, m) for stage, i, m in specs if not any(fnmatch.fnmatchcase(n, m) for n in names)]
    if not bad:
        return {"ok": True, "detail": f"every workload_probes match names a serving workload or owner ({len(specs)})"}
    where = getattr(playbook, "path", None)
    return {"ok": False, "input": True, "detail": "; ".join(
        f"stage {stage!r} (baseline) with.workload_probes[{i}] match {m!r} names no serving workload or owner on "
        "the play's nodes"
        for stage, i, m in bad) + f" (they run: {', '.join(names) or 'none'}). Fix the pattern in the playbook"
        + (f" {where}" if where else "") + ", or remove the probe"}


def controller_check(playbook: Any, inventory: Any, hosts: list[str], executor: Any = None) -> dict[str, Any]:
    """The controller's tools, its Kubernetes credentials (read-only access reviews: read
    nodes and pods, patch nodes, create evictions, hold the cluster's Lease), and, for Slurm
    nodes, the right to create the reservation that is the cluster lock
    (scheduler/slurm_access.py)."""
    try:
        tools = check_controller_tools(playbook, {h: inventory.hosts[h] for h in hosts})
    except InputError as exc:
        return {"ok": False, "detail": str(exc)}
    try:
        access = check_access({h: inventory.hosts[h] for h in hosts}, inventory.path, executor)
    except InputError as exc:
        # the kubeconfig the inventory names cannot be used to ask (as `plan --check-access`)
        return {"ok": False, "detail": str(exc), "input": True}
    slurm = check_slurm_access(inventory, hosts, executor)
    detail = ", ".join(f"{k}: {v}" for k, v in tools.items()) or "nothing beyond k3rollout"
    for a in access:
        missing = [c for c in a["checks"] if not c["allowed"]]
        detail += f"; Kubernetes API {a['server']}: " + (missing_rights(a, missing) if missing else
                                                          "credentials can cordon, evict and hold the Lease")
    for s in slurm:
        detail += f"; Slurm: {s['detail']}"
    # a missing Kubernetes right is the credentials the inventory names: bad input (exit 2),
    # as for `plan --check-access`
    short = not all(a["ok"] for a in access)
    return {"ok": not short and all(s["ok"] for s in slurm), "detail": detail,
            "kubernetes_access": access, **({"slurm_access": slurm} if slurm else {}),
            **({"input": True} if short else {})}


def missing_rights(access: dict[str, Any], missing: list[dict[str, Any]]) -> str:
    """The rights these credentials lack, for which nodes, and how to grant them."""
    nodes = access["nodes"]
    where = f"kubeconfig {access.get('kubeconfig') or '$KUBECONFIG or ~/.kube/config'}" + (
        f", context {access['context']}" if access.get("context") else "")
    rights = [f"{c['verb']} {c['resource']}{'.' + c['group'] if c['group'] else ''}"
              + (f" in namespace {c['namespace']}" if c.get("namespace") else "") + f" ({c['for']})" for c in missing]
    c = missing[0]
    can_i = f"kubectl auth can-i {c['verb']} {c['resource']}{'.' + c['group'] if c['group'] else ''}" + (
        f" -n {c['namespace']}" if c.get("namespace") else "")
    return (f"the credentials ({where}) for {', '.join(nodes[:5])}{' and more' if len(nodes) > 5 else ''} lack "
            f"{'; '.join(rights)}. Grant them in the Role or ClusterRole bound to these credentials (`{can_i}` "
            "answers yes once granted), or name other credentials with k3_kubeconfig and k3_kube_context")


def write_report(report: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    out = RunDir(out_dir)
    jpath, mpath = out.preflight_json, out.preflight_md
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
    if not report.get("play", {}).get("ok", True):
        lines += [f"Playbook: FAILED: {report['play']['detail']}", ""]
    if report.get("skipped_nodes"):
        lines += ["Left out of the run with --skip-node: " + ", ".join(report["skipped_nodes"]), ""]
    if report.get("no_change_nodes"):
        lines += ["Not changed by the play (no rollback checks; they stay in service): "
                  + "; ".join(f"{h}: {why}" for h, why in report["no_change_nodes"].items()), ""]
    lines += ["| node | check | result | detail |", "|---|---|---|---|"]
    for h, n in report["nodes"].items():
        for c in n["checks"]:
            result = "ok" if c["ok"] else "**FAIL** (input)" if c.get("input") else "**FAIL**"
            lines.append(f"| {h} | {c['check']} | {result} | "
                         f"{c['detail'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def summary_lines(report: dict[str, Any]) -> list[str]:
    out = []
    if not report["controller"].get("ok", True):
        out.append(f"controller: FAIL {report['controller']['detail']}")
    if not report.get("play", {}).get("ok", True):
        out.append(f"playbook: FAIL {report['play']['detail']}")
    for h in report["failed_nodes"]:
        for c in report["nodes"][h]["checks"]:
            if not c["ok"]:
                out.append(f"{h}: {c['check']}: {c['detail']}")
    return out


def bad_input(report: dict[str, Any], skip: list[str] | tuple[str, ...] = ()) -> list[str]:
    """What failed because the input is wrong (an inventory var that does not fit the node,
    the controller's Kubernetes rights, the playbook): ``run`` and ``preflight`` exit 2 when
    there is any, since the input must change before anything else helps (DESIGN.md, "CLI
    verbs"); the nodes left out with --skip-node do not count."""
    out = []
    if not report["controller"].get("ok", True) and report["controller"].get("input"):
        out.append("the controller's credentials")
    if not report.get("play", {}).get("ok", True) and report["play"].get("input"):
        out.append("the playbook")
    out += [f"{h} ({', '.join(c['check'] for c in report['nodes'][h]['checks'] if c.get('input') and not c['ok'])})"
            for h in report["failed_nodes"] if h not in skip
            and any(c.get("input") and not c["ok"] for c in report["nodes"][h]["checks"])]
    return out
