"""``k3_workload_backend: slurm``: checks and test servers are Slurm jobs in a maintenance
reservation on the node, started through the cluster's container launcher.

A DRAINED node refuses new jobs, including jobs in a maintenance reservation (measured on
Debian's slurmctld/slurmd 22.05: ``srun: Required node not available (down, drained or
reserved)``). So after the upgrade the node is put in a reservation for the rollout's user
(``Flags=MAINT,IGNORE_JOBS``) and only then resumed: only reservation jobs land there. The
reservation's create, resume, re-drain and delete are ``once`` steps with probes (a kill at
any point resumes without a second reservation); ``close_node`` drains the node again,
cancels the run's jobs there and deletes the reservation, so the uncordon stage and the
rollback meet the node DRAINED as the scheduler left it after the cordon.

Every command runs where the node's scheduler operations run (``k3_scheduler_host`` or the
controller), never over SSH to the node: ``pam_slurm_adopt`` often refuses that. A test
server's output file is read there too (``k3_slurm_output_dir``, a directory both the node
and that host see, as a shared home is on most Slurm clusters). Nothing here decides a
stage's outcome.

The launcher (``k3_container_launcher``) is one template per value:

  pyxis      srun ... --container-image=IMAGE CMD ARGS        (default)
  enroot     srun ... enroot start --rw [--env NAME...] IMAGE CMD ARGS
             (IMAGE: a container ``enroot create`` made; ``enroot start`` gives the container
             the image's environment, not the job's, so each variable of the launch is named)
  apptainer  srun ... apptainer exec --nv IMAGE CMD ARGS        (a registry image is ``docker://IMAGE``)
  docker     not this backend: the docker backend, over the node's transport, as before
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from typing import Any

from k3rollout.checks.triage import classify
from k3rollout.model.backends import LAUNCHER_VAR, launcher
from k3rollout.transport.base import CommandResult
from k3rollout.workload import slurm_launch
from k3rollout.workload.base import ApiPreflight, Endpoint, NodeCtx, Pulled, Restored, Run, ServerState, Verdict

LAUNCHERS = ("pyxis", "enroot", "apptainer")
GPU_REQUEST_VAR = "k3_slurm_gpu_request"        # gres (default), gpus-per-node, or none (no GPU GRES configured)
START_TIMEOUT_VAR = "k3_slurm_start_timeout"    # seconds a job may wait for its node before the stage fails
OUTPUT_DIR_VAR = "k3_slurm_output_dir"
PARTITION_VAR = "k3_slurm_partition"            # the partition the check jobs ask for (default: the cluster's)
DURATION_VAR = "k3_slurm_reservation_minutes"
# the address a multi-node replica's ranks meet at, when not the head's host name (plan/launch.py)
MASTER_ADDR_VAR = "k3_master_addr"
DEFAULT_START_TIMEOUT = 120.0
DEFAULT_OUTPUT_DIR = "/tmp"
DEFAULT_DURATION_MIN = 720
CLOSE_WAIT_S = 120.0
# what each launcher needs on the node, asked at preflight (pyxis runs enroot underneath)
LAUNCHER_PROBE = {"pyxis": ["enroot", "version"], "enroot": ["enroot", "version"],
                  "apptainer": ["apptainer", "--version"]}
# a stage's checks run in the reservation; observe's (after the window) never open one
OBSERVE = "observe"
GROUP_PREFIX = "k3rollout-check.group-"


def reservation_name(ctx: NodeCtx) -> str:
    return f"k3rollout-check.{ctx.node}.{ctx.run_id}"


def job_name(node: str, name: str) -> str:
    """A job's name: the test server's name and its node (unique per node, so a scancel by
    name never reaches another node's server)."""
    return f"{name}@{node}"


def replica_head(ctx: NodeCtx) -> str | None:
    """The head of the multi-node replica ``ctx.node`` serves in (None: a node of its own):
    the replica's server is one job, named after its head (``start_replica``)."""
    rep = getattr(ctx, "replica", None) or {}
    nodes = rep.get("nodes") or []
    return str(nodes[0]) if len(nodes) > 1 and ctx.node in nodes else None


def container(host_vars: dict[str, Any], image: str, argv: list[str],
              env: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(srun options, the job's command) that run ``argv`` in ``image`` with the node's
    launcher. ``env``: the names of the job's variables the program needs (set with
    ``sbatch --export``). pyxis and apptainer hand the job's environment to the container;
    ``enroot start`` starts from the image's and adds only what ``--env NAME`` names, taking
    the value from the job's (docs/domain.md "Workloads on Slurm GPU clusters")."""
    kind = launcher(host_vars)
    if kind == "pyxis":
        return [f"--container-image={image}"], argv
    if kind == "enroot":
        return [], ["enroot", "start", "--rw", *[w for name in env for w in ("--env", name)], image, *argv]
    if kind == "apptainer":
        ref = image if "://" in image or image.endswith(".sif") else f"docker://{image}"
        return [], ["apptainer", "exec", "--nv", ref, *argv]
    raise ValueError(f"{LAUNCHER_VAR}: {kind!r} is not one of {', '.join(LAUNCHERS)}")


def gpu_request(ctx: NodeCtx) -> list[str]:
    n = ctx.baseline.get("gpu_count") or ctx.facts.get("gpu_count")
    how = str(ctx.vars.get(GPU_REQUEST_VAR) or "gres")
    if how == "none" or not n:
        return []
    return [f"--gpus-per-node={n}"] if how == "gpus-per-node" else [f"--gres=gpu:{n}"]


def placement(ctx: NodeCtx) -> list[str]:
    """The job's node (and partition, where the inventory names one)."""
    part = ctx.vars.get(PARTITION_VAR)
    return ["-w", ctx.node, "-N", "1", *([f"--partition={part}"] if part else [])]


# what srun and sbatch print when a job never got its node (Debian's slurm 22.05)
_NOT_STARTED = ("srun: error: Unable to allocate resources", "srun: Required node not available",
                "sbatch: error: Batch job submission failed", "did not start within", "not started:",
                "maintenance reservation")


def not_started(res: CommandResult) -> str:
    """Slurm's own words when a check's job never started (''): the stage's reason. A job
    that waited and then got its node ("has been allocated resources") did start."""
    if "has been allocated resources" in res.stderr:
        return ""
    lines = [ln.strip() for ln in res.stderr.splitlines() if ln.strip().startswith(_NOT_STARTED)
             or any(k in ln for k in _NOT_STARTED[3:])]
    return "; ".join(lines)[:400]


def start_timeout(ctx: NodeCtx) -> float:
    return float(ctx.vars.get(START_TIMEOUT_VAR) or DEFAULT_START_TIMEOUT)


def squeue_rows(text: str) -> list[dict[str, str]]:
    """``squeue -h -o %i|%j|%u|%T|%r|%b|%P|%N``: one dict per job."""
    keys = ("job", "name", "user", "state", "reason", "gres", "partition", "nodes")
    return [dict(zip(keys, ln.split("|"), strict=False)) for ln in text.splitlines() if ln.count("|") >= 7]


SQUEUE_FORMAT = "%i|%j|%u|%T|%r|%b|%P|%N"


class SlurmJobs:
    kind = "slurm"

    # ------------------------------------------------------------ where and how

    def _where(self, ctx: NodeCtx) -> str | None:
        where: str | None = ctx.runner.scheduler(ctx).where(ctx)
        return where

    def _on(self, ctx: NodeCtx, name: str, argv: list[str], **kw: Any) -> CommandResult:
        return ctx.step(name, argv, on=self._where(ctx), **kw)

    def _reservation_exists(self, ctx: NodeCtx, name: str = "reservation-show") -> bool:
        res = self._on(ctx, name, ["scontrol", "show", "reservation", reservation_name(ctx)])
        return res.ok and f"ReservationName={reservation_name(ctx)}" in res.stdout

    def _state(self, ctx: NodeCtx) -> str:
        state: str = ctx.runner.scheduler(ctx).read_state(ctx)
        return state

    # ------------------------------------------------------------ the reservation

    def open_node(self, ctx: NodeCtx) -> tuple[bool, str]:
        """The node in the run's maintenance reservation, then resumed: only reservation
        jobs land there. The node must be out of service (DRAINED) when it is first asked."""
        resv = reservation_name(ctx)
        meta = {"reservation": resv}
        # a create this run started before a crash is settled by its probe (never sent twice)
        if ctx.runner.prior_meta(ctx, "reservation-create") is not None or not self._reservation_exists(ctx):
            user = ctx.step("reservation-user", ["id", "-un"], on=self._where(ctx)).stdout.strip() or "root"
            minutes = int(ctx.vars.get(DURATION_VAR) or DEFAULT_DURATION_MIN)
            res = self._on(ctx, "reservation-create", [
                "scontrol", "create", "reservation", f"ReservationName={resv}", f"Nodes={ctx.node}",
                f"Users={user}", "StartTime=now", f"Duration={minutes}", "Flags=MAINT,IGNORE_JOBS"],
                once=True, probe=lambda c, m: self._reservation_exists(c, "reservation-create-probe"), meta=meta)
            if not res.ok:
                return False, f"could not create the maintenance reservation {resv} (rc {res.rc}): {res.tail(300)}"
        if self._state(ctx) != "schedulable" or ctx.runner.prior_meta(ctx, "reservation-resume") is not None:
            res = self._on(ctx, "reservation-resume", ["scontrol", "update", f"NodeName={ctx.node}", "State=RESUME"],
                           once=True, probe=lambda c, m: self._state(c) == "schedulable", meta=meta)
            if not res.ok and self._state(ctx) != "schedulable":
                return False, f"could not resume {ctx.node} into {resv} (rc {res.rc}): {res.tail(300)}"
        return True, f"{ctx.node} resumed into the maintenance reservation {resv}"

    def close_node(self, ctx: NodeCtx) -> tuple[bool, str]:
        """Drain the node again (the baseline's Reason where someone else had drained it),
        cancel the run's jobs in its reservation and delete the reservation; wait for
        DRAINED. Nothing to do for a node whose reservation is gone and never was made."""
        ok, why = self.close_group(ctx)          # a batch's reservation this node headed, left by a crash
        if not ok:
            return False, why
        resv = reservation_name(ctx)
        meta = {"reservation": resv}
        exists = self._reservation_exists(ctx, "reservation-check")
        if not exists and ctx.runner.prior_meta(ctx, "reservation-delete") is None:
            return True, f"no maintenance reservation {resv}"
        reason = ctx.baseline.get("slurm_reason") if ctx.baseline.get("scheduler_state") != "schedulable" else None
        res = self._on(ctx, "reservation-drain", ["scontrol", "update", f"NodeName={ctx.node}", "State=DRAIN",
                                                  f"Reason={reason or f'k3rollout {ctx.run_id}'}"],
                       once=True, probe=lambda c, m: self._state(c) in ("draining", "cordoned"), meta=meta)
        if not res.ok and self._state(ctx) not in ("draining", "cordoned"):
            return False, f"could not drain {ctx.node} before deleting {resv} (rc {res.rc}): {res.tail(300)}"
        if exists:
            # slurmctld refuses to delete a reservation a job still names ("Requested
            # reservation is in use"), pending jobs included
            self._on(ctx, "reservation-jobs-cancel", ["scancel", f"--reservation={resv}"])
            deadline = time.monotonic() + CLOSE_WAIT_S
            while True:
                q = self._on(ctx, "reservation-jobs", ["squeue", "-h", f"--reservation={resv}", "-o", SQUEUE_FORMAT],
                             evidence=False)
                if q.ok and not squeue_rows(q.stdout):
                    break
                if time.monotonic() > deadline:
                    return False, f"jobs in {resv} did not end within {CLOSE_WAIT_S:.0f}s: {q.tail(300)}"
                time.sleep(0.5)
        res = self._on(ctx, "reservation-delete", ["scontrol", "delete", "reservation", resv], once=True,
                       probe=lambda c, m: not self._reservation_exists(c, "reservation-delete-probe"), meta=meta)
        if not res.ok and self._reservation_exists(ctx, "reservation-check-after"):
            return False, f"could not delete the maintenance reservation {resv} (rc {res.rc}): {res.tail(300)}"
        ok, why, _ = ctx.runner.scheduler(ctx).wait_drained(ctx, CLOSE_WAIT_S)
        if not ok:
            return False, why
        return True, f"{ctx.node} drained again and its maintenance reservation {resv} deleted"

    # ------------------------------------------------------------ jobs over several nodes

    def _group_name(self, ctx: NodeCtx) -> str:
        return f"{GROUP_PREFIX}{ctx.node}.{ctx.run_id}"

    def _group_exists(self, ctx: NodeCtx, name: str) -> bool:
        res = self._on(ctx, name, ["scontrol", "show", "reservation", self._group_name(ctx)])
        return res.ok and f"ReservationName={self._group_name(ctx)}" in res.stdout

    def open_group(self, ctx: NodeCtx, nodes: list[str]) -> tuple[bool, str]:
        """A job takes one reservation (slurm 22.05 answers ``--reservation=A,B`` with "Problem
        using reservation"): a job over several nodes runs in one more MAINT reservation over
        all of them (MAINT may overlap the nodes' own), made once per batch stage."""
        group = self._group_name(ctx)
        if ctx.runner.prior_meta(ctx, "group-reservation-create") is not None or \
                not self._group_exists(ctx, "group-reservation-show"):
            user = ctx.step("reservation-user", ["id", "-un"], on=self._where(ctx)).stdout.strip() or "root"
            res = self._on(ctx, "group-reservation-create", [
                "scontrol", "create", "reservation", f"ReservationName={group}", f"Nodes={','.join(nodes)}",
                f"Users={user}", "StartTime=now", f"Duration={int(ctx.vars.get(DURATION_VAR) or DEFAULT_DURATION_MIN)}",
                "Flags=MAINT,IGNORE_JOBS"], once=True, meta={"reservation": group, "nodes": nodes},
                probe=lambda c, m: self._group_exists(c, "group-reservation-probe"))
            if res.ok and not self._group_exists(ctx, "group-reservation-present"):
                # a create replayed from the journal, closed since by this stage (its server
                # stopped before a crash): made again under a step of its own
                res = self._on(ctx, "group-reservation-create-again", [
                    "scontrol", "create", "reservation", f"ReservationName={group}", f"Nodes={','.join(nodes)}",
                    f"Users={user}", "StartTime=now",
                    f"Duration={int(ctx.vars.get(DURATION_VAR) or DEFAULT_DURATION_MIN)}", "Flags=MAINT,IGNORE_JOBS"])
            if not res.ok:
                return False, f"could not create the reservation {group} over {', '.join(nodes)} (rc {res.rc}): " \
                    f"{res.tail(300)}"
        return True, group

    def close_group(self, ctx: NodeCtx) -> tuple[bool, str]:
        group = self._group_name(ctx)
        if ctx.runner.prior_meta(ctx, "group-reservation-delete") is None and \
                not self._group_exists(ctx, "group-reservation-check"):
            return True, ""
        self._on(ctx, "group-reservation-jobs-cancel", ["scancel", f"--reservation={group}"])
        res = self._on(ctx, "group-reservation-delete", ["scontrol", "delete", "reservation", group], once=True,
                       meta={"reservation": group},
                       probe=lambda c, m: not self._group_exists(c, "group-reservation-delete-probe"))
        return res.ok, "" if res.ok else f"could not delete {group} (rc {res.rc}): {res.tail(300)}"

    def collective(self, ctx: NodeCtx, name: str, nodes: list[str], gpus: int, prog: list[str],
                   timeout: float) -> CommandResult:
        """nccl-tests over ``nodes`` as one MPI job (``srun --mpi=pmix``, one task per GPU,
        ``-g 1`` each), in the node's reservation, or in the batch's when it spans nodes. After
        the window (observe) the node serves: no reservation is opened, and no GPU job starts
        beside the GPU jobs running there."""
        if ctx.stage == OBSERVE:
            free, why = self.gpu_work_allowed(ctx)
            if not free:
                return CommandResult(ctx.node, ("srun",), 1, "", why + "\n", 0.0)
            ok, resv = True, ""
        elif len(nodes) > 1:
            ok, resv = self.open_group(ctx, nodes)
        else:
            ok, resv = self.open_node(ctx)
            resv = reservation_name(ctx) if ok else resv
        if not ok:
            return CommandResult(ctx.node, ("srun",), 1, "", resv + "\n", 0.0)
        part = ctx.vars.get(PARTITION_VAR)
        return self._on(ctx, name, [
            "srun", "--mpi=pmix", *([f"--reservation={resv}"] if resv else []), "-w", ",".join(nodes),
            "-N", str(len(nodes)),
            f"--ntasks-per-node={gpus}", *([f"--partition={part}"] if part else []), *gpu_request(ctx),
            f"--immediate={int(start_timeout(ctx))}", "--export=ALL,NCCL_DEBUG=INFO",
            f"--job-name={job_name(ctx.node, 'k3rollout-' + name)}", *prog], timeout=timeout)

    # ------------------------------------------------------------ images

    def image_store(self, run: Run, host_vars: dict[str, Any]) -> str:
        # the launcher's cache on the node (enroot's ENROOT_CACHE_PATH, apptainer's cache)
        return str(host_vars.get("k3_image_store") or "/var/tmp")

    def image_cached(self, run: Run, image: str) -> bool:
        return False            # the launcher pulls at job start; nothing is read on the node

    def image_facts(self, ctx: NodeCtx, image: str, name: str = "image-inspect") -> dict[str, Any] | None:
        # the image is imported by the launcher when the job starts: there is no local
        # store to inspect; CUDA init in the image (cuda_check) shows what it needs
        return {"digest": None, "cuda": None, "vllm_version": None}

    def pull(self, ctx: NodeCtx, image: str, name: str = "image-pull", timeout: float = 3600) -> CommandResult:
        return CommandResult(ctx.node, ("true",), 0, "", "", 0.0)

    def pull_pinned(self, run: Run, ref: str) -> Pulled:
        return Pulled(True, ref, None, "the launcher imports the image when a job starts")

    def pull_command(self) -> str:
        return f"srun with {LAUNCHER_VAR}'s import (enroot import, apptainer pull)"

    # ------------------------------------------------------------ baseline

    def runtime_facts(self, ctx: NodeCtx) -> dict[str, Any]:
        """The node's jobs and their users (``squeue -w``), its partitions and their state
        (``sinfo``), its Slurm state and Reason: what a rollback and the report compare with."""
        f: dict[str, Any] = {"workload_backend": self.kind, "container_launcher": launcher(ctx.vars),
                             "nvidia_runtime": None}
        q = self._on(ctx, "slurm-jobs", ["squeue", "-h", "-w", ctx.node, "-o", SQUEUE_FORMAT])
        jobs = squeue_rows(q.stdout) if q.ok else []
        f["slurm_jobs"] = jobs
        f["slurm_job_users"] = sorted({j["user"] for j in jobs})
        f["containers"] = [{"name": job_name(ctx.node, j["name"]), "image": "", "state": j["state"].lower(),
                            "job": j["job"]} for j in jobs]
        p = self._on(ctx, "slurm-partition", ["sinfo", "-h", "-n", ctx.node, "-o", "%P|%a|%T"])
        f["slurm_partitions"] = [dict(zip(("partition", "availability", "node_state"), ln.split("|"), strict=False))
                                 for ln in p.stdout.splitlines() if ln.count("|") == 2] if p.ok else []
        node = self._on(ctx, "slurm-node", ["scontrol", "show", "node", ctx.node])
        reason = next((ln.strip()[len("Reason="):] for ln in node.stdout.splitlines()
                       if ln.strip().startswith("Reason=")), None)
        if reason:
            # "hw check RMA-4411 [root@2026-12-05T00:33:28]": the text without who and when
            f["slurm_reason"] = reason.rsplit(" [", 1)[0]
        return f

    def serving_workloads(self, ctx: NodeCtx, containers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # a Slurm node's own work is its users' jobs: the drain lets them end, and their
        # owners resubmit; nothing here is stopped or restarted by k3rollout
        return []

    def prior_failures(self, ctx: NodeCtx, containers: list[dict[str, Any]],
                       failure_names: list[str]) -> list[dict[str, Any]]:
        """The failed K3 attempt's job output where the playbook names its path (a name
        with a ``/``) or its job id (digits: its ``StdOut=`` from ``scontrol show job``)."""
        failures = []
        for i, ref in enumerate(failure_names, start=1):
            path = ref
            if ref.isdigit():
                job = self._on(ctx, f"failed-job-{ref}", ["scontrol", "show", "job", ref])
                path = next((w[len("StdOut="):] for w in job.stdout.split() if w.startswith("StdOut=")), "")
            if "/" not in path:
                continue
            out = self._on(ctx, f"failed-job-output-{i}", ["cat", path])
            if not out.ok:
                continue
            tri = classify(out.stdout + out.stderr)
            failures.append({"container": ref, "job_output": path, "triage": tri.category,
                             "evidence": tri.evidence[:3], "inspect_saved": True})
        return failures

    # ------------------------------------------------------------ after the driver stage

    def after_driver(self, ctx: NodeCtx, timeout_s: float) -> tuple[bool, str, dict[str, Any]]:
        # the node stays DRAINED until its reservation is opened: slurmctld hands out its GPUs
        # only then, to the run's jobs (open_node)
        return True, "", {}

    def gpu_work_allowed(self, ctx: NodeCtx) -> tuple[bool, str]:
        """Inside the run the node is the reservation's; after the window (observe) no GPU
        job starts beside the GPU jobs squeue shows running there."""
        if ctx.stage != OBSERVE:
            return True, ""
        busy = self._gpu_jobs(ctx)
        if busy:
            return False, f"not started: GPU jobs run on the node ({', '.join(j.get('job', '?') for j in busy)})"
        return True, ""

    # ------------------------------------------------------------ one-off checks

    def _gpu_jobs(self, ctx: NodeCtx) -> list[dict[str, str]]:
        q = self._on(ctx, "slurm-jobs-now", ["squeue", "-h", "-w", ctx.node, "-t", "RUNNING,COMPLETING",
                                             "-o", SQUEUE_FORMAT])
        return [j for j in squeue_rows(q.stdout) if "gpu" in j.get("gres", "")] if q.ok else [{"job": "?"}]

    def run_check(self, ctx: NodeCtx, name: str, image: str, entrypoint: str, args: list[str],
                  timeout: float = 600.0) -> CommandResult:
        opts, cmd = container(ctx.vars, image, [entrypoint, *args])
        where = [*placement(ctx), f"--immediate={int(start_timeout(ctx))}",
                 f"--job-name={job_name(ctx.node, 'k3rollout-' + name)}"]
        if ctx.stage == OBSERVE:
            # after the window the node serves: no reservation is opened, and no GPU job
            # starts beside the GPU jobs running there (asked again here: observe asks first)
            free, why = self.gpu_work_allowed(ctx)
            if not free:
                return CommandResult(ctx.node, ("srun",), 1, "", why + "\n", 0.0)
            return self._on(ctx, name, ["srun", *where, *gpu_request(ctx), *opts, *cmd], timeout=timeout)
        ok, why = self.open_node(ctx)
        if not ok:
            return CommandResult(ctx.node, ("srun",), 1, "", why + "\n", 0.0)
        return self._on(ctx, name, ["srun", f"--reservation={reservation_name(ctx)}", *where, *gpu_request(ctx),
                                    *opts, *cmd], timeout=timeout)

    # ------------------------------------------------------------ test servers

    def _owner(self, ctx: NodeCtx) -> str:
        """The node a test server's job is named after: the replica's head for every member."""
        return replica_head(ctx) or ctx.node

    def _output(self, ctx: NodeCtx, name: str) -> str:
        out_dir = str(ctx.vars.get(OUTPUT_DIR_VAR) or DEFAULT_OUTPUT_DIR).rstrip("/")
        return f"{out_dir}/{name}.{self._owner(ctx)}.{ctx.run_id}.out"

    def _job(self, ctx: NodeCtx, name: str, step: str) -> dict[str, str] | None:
        q = self._on(ctx, step, ["squeue", "-h", f"--name={job_name(self._owner(ctx), name)}", "-o",
                                 SQUEUE_FORMAT], evidence=False)
        rows = squeue_rows(q.stdout) if q.ok else []
        return rows[-1] if rows else None

    def _wait_started(self, ctx: NodeCtx, name: str, res: CommandResult) -> tuple[CommandResult, str]:
        """After ``sbatch --parsable``: wait until the job leaves PENDING, at most the start
        timeout (a job left pending is cancelled, and Slurm's reason for it is the failure);
        (the step's result, the job id)."""
        if not res.ok:
            return res, ""
        job = res.stdout.strip().split(";")[0]
        deadline = time.monotonic() + start_timeout(ctx)
        while True:
            q = self._on(ctx, f"{name}-job", ["squeue", "-h", "-j", job, "-o", SQUEUE_FORMAT], evidence=False)
            rows = squeue_rows(q.stdout) if q.ok else []
            state = rows[0]["state"] if rows else "ENDED"
            if state != "PENDING":
                return CommandResult(ctx.node, tuple(res.argv), 0, f"job {job} {state}\n", "", res.duration_s), job
            if time.monotonic() > deadline:
                self._on(ctx, f"{name}-cancel", ["scancel", job])
                return CommandResult(ctx.node, tuple(res.argv), 1, "", f"job {job} did not start within "
                                     f"{start_timeout(ctx):.0f}s: PENDING ({rows[0]['reason']})\n",
                                     res.duration_s), job
            time.sleep(0.5)

    def start_server(self, ctx: NodeCtx, name: str, image: str, model: str, args: list[str], port: int,
                     env: dict[str, str] | None = None) -> CommandResult:
        """``sbatch`` a job holding the node's GPUs that runs ``vllm serve``; the step's
        output is the job id; then wait until the job runs, at most the start timeout (a
        job left pending is cancelled, and Slurm's reason for it is the failure)."""
        ok, why = self.open_node(ctx)
        if not ok:
            return CommandResult(ctx.node, ("sbatch",), 1, "", why + "\n", 0.0)
        opts, cmd = container(ctx.vars, image, ["vllm", "serve", model, *args, "--port", str(port)], tuple(env or ()))
        exports = [f"--export=ALL,{','.join(f'{k}={v}' for k, v in env.items())}"] if env else []
        srun = shlex.join(["srun", *opts, *cmd])
        res = self._on(ctx, f"{name}-run", [
            "sbatch", "--parsable", f"--reservation={reservation_name(ctx)}", *placement(ctx),
            f"--job-name={job_name(ctx.node, name)}", f"--output={self._output(ctx, name)}", "--open-mode=append",
            *gpu_request(ctx), *exports, f"--wrap={srun}"])
        return self._wait_started(ctx, name, res)[0]

    def start_replica(self, ctx: NodeCtx, name: str, image: str, model: str, port: int,
                      members: list[tuple[NodeCtx, list[str], dict[str, str]]]) -> CommandResult:
        """A multi-node replica as ONE job over its nodes (``members``: each node's context,
        its planned ``vllm serve`` arguments and environment, head first), in a reservation
        over all of them (a job takes one reservation). Each task takes its rank from
        ``SLURM_NODEID`` and the head's address from the first host of ``SLURM_JOB_NODELIST``,
        or the head's ``k3_master_addr`` where set (workload/slurm_launch.py). The gates go to the head's address, so the job's first
        host must be the replica's head. Slurm numbers a job's nodes in its host list's order,
        whatever order ``-w`` or slurm.conf gives (docs/domain.md "Workloads on Slurm GPU
        clusters"); a replica whose head is not first there is refused with both orders named."""
        nodes = [m[0].node for m in members]
        for mctx, _, _ in members:
            ok, why = self.open_node(mctx)          # each node out of its drain, into its own reservation
            if not ok:
                return CommandResult(ctx.node, ("sbatch",), 1, "", why + "\n", 0.0)
        ok, group = self.open_group(ctx, nodes)
        if not ok:
            return CommandResult(ctx.node, ("sbatch",), 1, "", group + "\n", 0.0)
        env = members[0][2]
        opts, prefix = container(ctx.vars, image, [], tuple(env))
        try:
            script = slurm_launch.task_script(prefix, model, members[0][1], members[1][1], port)
        except ValueError as exc:
            return CommandResult(ctx.node, ("sbatch",), 1, "", f"{exc}\n", 0.0)
        part = ctx.vars.get(PARTITION_VAR)
        res = self._on(ctx, f"{name}-run", [
            "sbatch", "--parsable", f"--reservation={group}", "-w", ",".join(nodes), "-N", str(len(nodes)),
            "--ntasks-per-node=1", *([f"--partition={part}"] if part else []), f"--job-name={job_name(ctx.node, name)}",
            f"--output={self._output(ctx, name)}", "--open-mode=append", *gpu_request(ctx),
            *([f"--export=ALL,{','.join(f'{k}={v}' for k, v in env.items())}"] if env else []),
            f"--wrap={slurm_launch.batch_wrap(opts, script, ctx.vars.get(MASTER_ADDR_VAR) or None)}"])
        started, job = self._wait_started(ctx, name, res)
        if not started.ok:
            return started
        q = self._on(ctx, f"{name}-nodes", ["squeue", "-h", "-j", job, "-o", "%N"])
        hosts = self._on(ctx, f"{name}-hostnames", ["scontrol", "show", "hostnames", q.stdout.strip()]) \
            if q.ok and q.stdout.strip() else q
        order = hosts.stdout.split() if hosts.ok else []
        if order and order[0] != ctx.node:
            self._on(ctx, f"{name}-cancel", ["scancel", job])
            return CommandResult(ctx.node, tuple(res.argv), 1, "", (
                f"job {job}: Slurm numbers the replica's nodes {', '.join(order)} (SLURM_NODEID 0 is {order[0]}), "
                f"but the plan's head is {ctx.node}: the head must be the node that comes first in the job's "
                f"host list (list {order[0]} first among the replica's hosts in the inventory)\n"), res.duration_s)
        return CommandResult(ctx.node, tuple(res.argv), 0, f"{started.stdout}nodes {', '.join(order)}\n", "",
                             res.duration_s)

    def server_state(self, ctx: NodeCtx, name: str, step: str, *, evidence: bool = True) -> ServerState:
        job = self._job(ctx, name, step)
        if job is not None:
            state = job["state"]
            return ServerState("running" if state == "RUNNING" else state.lower(), text=f"job {job['job']} {state} "
                               f"({job['reason']})")
        gone = ServerState("exited", text=f"job {job_name(self._owner(ctx), name)} is no longer in squeue")
        if replica_head(ctx) is None:
            return gone
        # a member of a replica's ended job: srun's line about its task says how it ended
        # ("Exited with exit code 1", or "Terminated" when another task ended the job)
        out = self._on(ctx, step, ["cat", self._output(ctx, name)], evidence=evidence)
        end = slurm_launch.task_end(out.stdout, ctx.node)
        return gone if end is None else ServerState(end.state, end.code, end.line)

    def server_restarts(self, ctx: NodeCtx, name: str, step: str) -> tuple[str, int]:
        st = self.server_state(ctx, name, step)
        return st.state, 0 if st.running else -1

    def server_logs(self, ctx: NodeCtx, name: str, step: str) -> CommandResult:
        res = self._on(ctx, step, ["cat", self._output(ctx, name)])
        if replica_head(ctx) is None or not res.ok:
            return res
        # one output for the replica's job: this node's task's lines (srun --label)
        return CommandResult(res.host, tuple(res.argv), res.rc, slurm_launch.node_output(res.stdout, ctx.node),
                             res.stderr, res.duration_s)

    def remove_server(self, ctx: NodeCtx, name: str, step: str) -> CommandResult:
        return self._on(ctx, step, ["scancel", f"--name={job_name(self._owner(ctx), name)}"])

    def removal_plan(self, names: tuple[str, ...]) -> list[list[str]]:
        return [["scancel", f"--name={job_name('<node>', n)}"] for n in names]

    def not_started(self, res: CommandResult) -> str:
        return not_started(res)

    def endpoint(self, ctx: NodeCtx, port: int) -> Endpoint:
        return Endpoint("")         # the node's own address, as for a Docker host

    # ------------------------------------------------------------ the node's own workloads

    def route_to_serving(self, ctx: NodeCtx, workload: dict[str, Any], port: int) -> str:
        return ""                   # no serving workloads of its own (serving_workloads is empty)

    def unroute(self, ctx: NodeCtx, port: int) -> None:
        return None

    def release_gpus(self, ctx: NodeCtx) -> list[str]:
        return []                   # the drain waited for the node's jobs to end

    def restore_serving(self, ctx: NodeCtx, stopped: list[str]) -> Restored:
        """Before the uncordon: out of the reservation and DRAINED again, so the uncordon
        stage resumes (or keeps drained) the node as it would any drained node."""
        ok, why = self.close_node(ctx)
        return Restored() if ok else Restored(failed=[f"the maintenance reservation ({why})"], reason=why)

    def prove_serving(self, ctx: NodeCtx) -> Restored:
        return Restored()

    def restore_images(self, ctx: NodeCtx, containers: list[dict[str, Any]]) -> tuple[bool, str]:
        return True, "no serving containers: the node's users resubmit their jobs"

    def serving_problems(self, ctx: NodeCtx, names: list[str]) -> list[str]:
        return []

    def serving_status(self, ctx: NodeCtx, name: str) -> dict[str, Any]:
        q = self._on(ctx, f"serving-job-{name}", ["squeue", "-h", "-w", ctx.node, "-o", SQUEUE_FORMAT])
        rows = [j for j in squeue_rows(q.stdout) if job_name(ctx.node, j["name"]) == name]
        if not rows:
            return {"state": "missing", "reason": f"no job {name} on {ctx.node} in squeue"}
        return {"state": rows[0]["state"].lower(), "restart_count": None, "image": None, "args": []}

    # ------------------------------------------------------------ preflight

    def preflight(self, run: Run, host_vars: dict[str, Any]) -> Verdict:
        """The launcher is known and installed on the node (pyxis runs enroot underneath)."""
        kind = launcher(host_vars)
        if kind not in LAUNCHERS:
            return Verdict(False, f"{LAUNCHER_VAR}: {kind!r} is not one of {', '.join(LAUNCHERS)} (or docker)")
        res = run("container-launcher", LAUNCHER_PROBE[kind])
        if res.rc == 127 or "command not found" in res.stderr:
            return Verdict(False, f"{LAUNCHER_VAR} is {kind}, but {LAUNCHER_PROBE[kind][0]} is not installed on this "
                                  f"node (rc {res.rc}: {res.tail(120).strip()}); install it, or set {LAUNCHER_VAR} to "
                                  "the launcher this cluster uses (pyxis, enroot, apptainer, docker)")
        if not res.ok:
            return Verdict(False, f"{LAUNCHER_PROBE[kind][0]} does not answer (rc {res.rc}: {res.tail(200).strip()})")
        return Verdict(True, f"{kind}: {res.stdout.strip().splitlines()[0] if res.stdout.strip() else 'installed'}")

    def preflight_api(self, kube: Callable[[], Any] | None, node: str, host_vars: dict[str, Any]) -> ApiPreflight:
        return ApiPreflight()

