"""The rollout playbook: one Ansible-style play whose ``stages`` follow docs/domain.md's order.

A playbook is a YAML list holding exactly one play::

    - name: ...
      hosts: gpu_nodes           # Ansible host pattern
      serial: [1, 2, "25%"]      # Ansible serial semantics
      max_fail_percentage: 25    # per batch, as in Ansible (fail when exceeded)
      min_serving: "75%"         # capacity floor: nodes (or %) that must stay in service
      vars: {...}
      stages:
        - name: ...
          stage: baseline|cordon|driver_upgrade|cuda_check|vllm_smoke|features|multinode|uncordon
          estimate: 20m
          pre:  {that: [...], fail_msg: ...}
          post: {that: [...], fail_msg: ...}
          rollback: [{action: restore_driver}, ...]
          with: {...}            # the stage's parameters, templated with vars and facts

Validation happens once, here; every error names the file and line.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from k3rollout.errors import InputError
from k3rollout.model.assertions import AssertionSyntaxError, check_expression, check_template, render, templated
from k3rollout.model.durations import parse_duration
from k3rollout.model.profile import load_profile, resolve_profile_path
from k3rollout.model.stagekinds import (
    RECORDS_BASELINE,
    RETURNS_TO_SERVICE,
    TAKES_OUT_OF_SERVICE,
    StageKind,
    Undo,
    derive,
)
from k3rollout.model.yamlsrc import LDict, LList, line_at, load_yaml, plain

RollbackAction = Literal["restore_driver", "stop_test_server", "restore_serving_image",
                         "uncordon_if_healthy"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _compiles(check: Any) -> Any:
    """A pydantic validator that compiles a Jinja2 expression or template once, at load."""

    def validate(text: str) -> str:
        try:
            check(text)
        except AssertionSyntaxError as exc:
            raise ValueError(str(exc)) from None
        return text

    return AfterValidator(validate)


Expression = Annotated[str, _compiles(check_expression)]
TemplateArg = Annotated[str, _compiles(check_template)]


class AssertBlock(_Strict):
    that: list[Expression]
    fail_msg: str | None = None

    @field_validator("that", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("that")
    @classmethod
    def _not_empty(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("`that:` needs at least one expression")
        return v


class RollbackStep(_Strict):
    action: RollbackAction
    reboot: bool = True


Argv = Annotated[list[TemplateArg], Field(min_length=1)]


class VendorSteps(_Strict):
    apt: list[Argv] = Field(default_factory=list)
    dnf: list[Argv] = Field(default_factory=list)


Duration = Annotated[float, BeforeValidator(parse_duration)]


class WorkloadProbe(_Strict):
    """How one of the node's own serving workloads is proven to work, at baseline and again
    once it is back after the uncordon: an HTTP request from the controller (``path`` on its
    serving port, answered with ``status``), or a ``command`` run on the node (exit 0). A
    workload no probe matches gets the default: its serving endpoint's /health, then one short
    chat request to the model it lists."""

    match: str = Field(min_length=1)       # fnmatch pattern on the workload's or its owner's name
    path: str | None = Field(default=None, pattern=r"^/")
    status: int = Field(default=200, ge=100, le=599)
    port: int | None = Field(default=None, ge=1, le=65535)
    command: list[str] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one(self) -> WorkloadProbe:
        if (self.path is None) == (self.command is None):
            raise ValueError("a workload probe declares exactly one of path (HTTP) and command")
        return self


class BaselineParams(_Strict):
    failure_containers: list[str] = Field(default_factory=lambda: ["kimi-k3"])
    image: str = "{{ vllm_image }}"
    # how the node's own workloads are proven (the uncordon stage proves them again)
    workload_probes: list[WorkloadProbe] = Field(default_factory=list)


class CordonParams(_Strict):
    drain_timeout: Duration = 600


class VendorTasks(_Strict):
    """Ansible task files (paths relative to the playbook) per package manager."""

    apt: str | None = None
    dnf: str | None = None


class DriverParams(_Strict):
    target_driver: str = "{{ target_driver }}"
    target_branch: int | str = "{{ target_branch }}"
    tasks: VendorTasks = Field(default_factory=VendorTasks)
    install: VendorSteps
    restore: VendorSteps
    reboot_timeout: Duration = 900
    # after a crash mid-reboot: how long a host may keep its old boot id before we decide
    # the reboot never happened (sshd stops within seconds of a real reboot)
    reboot_grace: Duration = 10
    # k3_driver_backend gpu-operator: how long the GPU Operator may take to move the node
    # through its upgrade states to upgrade-done (stages/driver/gpu_operator.py)
    operator_timeout: Duration = 3600


class CudaParams(_Strict):
    image: str = "{{ vllm_image }}"
    # k3_workload_backend kubernetes: how long the node may take to be Ready with its
    # nvidia.com/gpu allocatable again after the driver change (the GPU Operator's
    # validation-required waits 600 s)
    gpu_ready_timeout: Duration = 600


class ServerParams(_Strict):
    """A vLLM test server: image, model, launch flags, port, and how long to wait for /health."""

    image: str = "{{ vllm_image }}"
    model: str = "{{ model }}"
    args: list[str] = Field(default_factory=list)
    port: int = Field(default=8000, ge=1, le=65535)
    health_timeout: Duration = 1800


class SmokeParams(ServerParams):
    prompt: str = "Say hello in one word."


class FeatureParams(ServerParams):
    """The reference launch and the load ladder's thresholds (docs/domain.md steps 3-5)."""

    prefix_repeats: int = Field(default=2, ge=2)
    prefix_words: int = Field(default=2000, ge=64)
    # the server's prefix-cache block, in tokens (a model profile sets it: 1,536 for Kimi K3).
    # The last matched block is never reused, so the shared prefix is made at least two full
    # blocks plus a tail; without it, prefix_words is used as given
    prefix_block_tokens: int | None = Field(default=None, ge=1)
    tool_call: bool = True
    # the agent flow (docs/domain.md "Tool calls"): a multi-turn tool loop (call, tool result, next
    # call ... final answer), streaming and not, every call's arguments validated against its
    # tool's JSON schema. 0 turns skips it; a model profile sets its own (Kimi K3: 3). The
    # thresholds follow Moonshot's K2-Vendor-Verifier, which measures the same things: its
    # well-rated deployments (Moonshot's own API among them) score 100% schema accuracy and
    # a finish_reason "tool_calls" for every successful call and no other [github.com/MoonshotAI/
    # K2-Vendor-Verifier README]. Empty calls are retried, as the vLLM recipe advises; the
    # share of empty replies allowed is this project's default (one in four attempts)
    agent_turns: int = Field(default=0, ge=0, le=4)
    agent_retries: int = Field(default=2, ge=0)                # per turn, for an empty or invalid call
    agent_min_schema_accuracy: float = Field(default=1.0, ge=0, le=1)
    agent_min_finish_agreement: float = Field(default=1.0, ge=0, le=1)
    agent_max_empty_rate: float = Field(default=0.25, ge=0, le=1)
    vision: bool = True
    context_tokens: int = Field(default=65536, ge=0)          # 0 skips the target-context request
    concurrency: list[int] = Field(default_factory=lambda: [1, 4, 16, 64])
    ladder_max_tokens: int = Field(default=64, ge=1)
    request_timeout: Duration = 300
    p95_latency_max_s: float = Field(default=30.0, gt=0)
    ttft_p95_max_s: float = Field(default=10.0, gt=0)
    max_error_rate: float = Field(default=0.0, ge=0, le=1)
    max_restarts: int = Field(default=0, ge=0)
    gpu_mem_max_pct: float | None = Field(default=None, gt=0, le=100)

    @field_validator("concurrency")
    @classmethod
    def _rising(cls, v: list[int]) -> list[int]:
        if not v or any(x < 1 for x in v) or any(b <= a for a, b in itertools.pairwise(v)):
            raise ValueError("concurrency must be a non-empty list of rising positive integers, e.g. [1, 4, 16, 64]")
        return v


class MultinodeParams(_Strict):
    min_busbw_gbps: float = Field(default=100.0, ge=0)
    # also test between an upgraded node and a not-yet-upgraded one (the cluster lives mixed
    # for the whole rollout): true picks the next batch's first node, or name the host. It
    # runs one GPU per node on the peer, which is still serving: keep the sizes small.
    mixed_version_peer: bool | str = False
    mixed_argv: list[str] = Field(default_factory=lambda: ["all_reduce_perf", "-b", "8", "-e", "128M", "-f", "2",
                                                           "-g", "1"])
    mixed_min_busbw_gbps: float | None = Field(default=None, ge=0)
    # across nodes, NCCL's own log must show the RDMA transport (IB or RoCE: both are NET/IB);
    # a silent fallback to TCP sockets fails the stage with NCCL's lines as evidence
    require_rdma: bool = True
    require_gpudirect_rdma: bool = False        # also GPUDirect RDMA (NET/IB/.../GDRDMA)
    argv: list[str] = Field(default_factory=lambda: ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8"])


class UncordonParams(_Strict):
    # k3_workload_backend kubernetes: how long, after the uncordon, each owner baseline saw
    # (Deployment, StatefulSet, LeaderWorkerSet) may take to be back to its readyReplicas
    # (loading K3's weights takes long: the recipe's VLLM_ENGINE_READY_TIMEOUT_S is 3600)
    serving_ready_timeout: Duration = 3600


# Every stage kind, once, in docs/domain.md's "The change, in order": evidence, cordon, upgrade,
# CUDA init, minimal launch, features and cross-node, then expansion. The order is a safety
# rule, not a preference. Each kind's behaviour is its module's ``StageSpec`` under
# k3rollout/stages; every table below (and the state machine's, and the registry's) is
# derived from these declarations (model/stagekinds.py).
STAGE_KINDS: tuple[StageKind, ...] = (
    StageKind("baseline", scope="node", params=BaselineParams, destructive=False, state="baseline-required",
              runbook="01-baseline.md", estimate_s=120, role=RECORDS_BASELINE),
    StageKind("cordon", scope="node", params=CordonParams, destructive=True, state="cordon-required",
              runbook="02-cordon.md", estimate_s=300, role=TAKES_OUT_OF_SERVICE,
              undone_by=(Undo("uncordon_if_healthy", then_publish_failed=True,
                              plan_text="uncordon only if the node was schedulable before the run and passes GPU "
                                        "health checks; otherwise keep it cordoned"),
                         # on_node_failure: quarantine puts quarantine in place of uncordon_if_healthy
                         Undo("quarantine", scheduler_only=True, instead_of_under_quarantine="uncordon_if_healthy",
                              plan_text="keep the node cordoned and mark it quarantined for a person (never "
                                        "uncordoned by the run); counted against the failure budget"))),
    StageKind("driver_upgrade", scope="node", params=DriverParams, destructive=True, state="upgrade-required",
              runbook="03-driver-upgrade.md", estimate_s=1200,
              # its reserve is the driver stage's own estimate; without a sound driver the
              # node must stay out of service
              undone_by=(Undo("restore_driver", estimate_s=None,
                              plan_text="reinstall driver packages recorded by baseline (expected {expected})",
                              plan_text_reboot=", reboot, verify nvidia-smi and the kernel module",
                              # the GPU Operator's driver container: its pool label, never host packages
                              plan_text_for=(("driver:gpu-operator",
                                              "move the node back to the GPU Operator's NVIDIADriver pool baseline "
                                              "records (its pool label), wait for nvidia.com/gpu-driver-upgrade-state="
                                              "upgrade-done, verify nvidia-smi and the kernel module report "
                                              "{expected}"),),
                              failure_stops_rest="driver restore failed; node kept cordoned"),)),
    StageKind("cuda_check", scope="node", params=CudaParams, destructive=True, state="validation-required",
              runbook="04-cuda-check.md", estimate_s=180, runs_image=True),
    StageKind("vllm_smoke", scope="replica", params=SmokeParams, destructive=True, state="smoke-test-required",
              runbook="05-vllm-smoke.md", estimate_s=900, runs_image=True, loads_model=True,
              undone_by=(Undo("stop_test_server", plan_text="stop and remove the k3rollout test vLLM container",
                              plan_text_for=(("workload:kubernetes", "delete the k3rollout test server Pods on the "
                                                                     "node through the API server"),
                                             ("workload:slurm", "scancel the k3rollout test server jobs on the node"))),
                         # also owed after any driver change: the reboots stop the serving
                         # containers, and a failure before the smoke test (which stops them
                         # itself) must not leave them down
                         Undo("restore_serving_image", also_after=("driver_upgrade",),
                              plan_text="restart the serving container on the image digest baseline records",
                              plan_text_for=(("workload:kubernetes",
                                              "check that the owners of the node's serving Pods still run the image "
                                              "digests baseline records (they bring their Pods back after the "
                                              "uncordon; nothing is started by hand)"),
                                             ("workload:slurm", "nothing to restart: a Slurm node runs no serving "
                                                                "containers; its users resubmit their jobs"))))),
    StageKind("features", scope="replica", params=FeatureParams, destructive=True, state="feature-test-required",
              runbook="06-features-multinode.md", estimate_s=600, runs_image=True, loads_model=True),
    StageKind("multinode", scope="batch", params=MultinodeParams, destructive=True, state="multinode-test-required",
              runbook="06-features-multinode.md", estimate_s=300),
    StageKind("uncordon", scope="node", params=UncordonParams, destructive=True, state="uncordon-required",
              runbook="07-uncordon.md", estimate_s=60, role=RETURNS_TO_SERVICE),
)
STAGE_TABLES = derive(STAGE_KINDS)
STAGE_ORDER = STAGE_TABLES.order
DEFAULT_ESTIMATES = STAGE_TABLES.estimates
# a stage whose run takes the node out of service or changes it: from the first one on, a
# failure owes the node a rollback (engine/states.py builds its FAILED transitions from this)
DESTRUCTIVE_STAGES = STAGE_TABLES.destructive
BATCH_SCOPED_STAGES = STAGE_TABLES.batch_scoped
REPLICA_SCOPED_STAGES = STAGE_TABLES.replica_scoped
PARAMS_BY_KIND = STAGE_TABLES.params
# Which stage's changes each rollback action undoes (so a node is only rolled back for
# what actually ran on it).
ROLLBACK_UNDOES = STAGE_TABLES.rollback_undoes
# The order a node's rollback runs its actions in, whichever stages declare them: the test
# server goes first (it holds the GPUs), the driver before the serving containers it runs
# under, the scheduler last. The plan a change board approves lists them in this order too.
ROLLBACK_ORDER = ("stop_test_server", "restore_driver", "restore_serving_image", "uncordon_if_healthy")
if TYPE_CHECKING:
    StageName = str
else:
    # the `stage:` values a playbook may name (pydantic lists them in order when one is not)
    StageName = Literal[STAGE_ORDER]


class Pause(_Strict):
    """Wait before going on: for ``k3rollout approve RUN_DIR`` (no duration), or for a
    duration (``approve`` may end it early; ``approve --reject`` stops the rollout)."""

    duration: float | None = None
    reason: str | None = None

    @field_validator("duration", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return None if v is None else parse_duration(v)


class Prestage(_Strict):
    """Work done on a node while it still serves, before the batches (engine/prestage.py):
    download the target driver packages without installing them, pull the image by digest,
    check the model weights' manifest, check disk space."""
    parallel: int = Field(default=4, ge=1, le=4096)        # nodes pre-staged at once
    min_free_gib: float = Field(default=50, ge=0)          # free space each checked path must keep
    image_digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    weights_manifest: str | None = None                    # sha256sum-style manifest where the weights live
    estimate: float = 600.0

    @field_validator("estimate", mode="before")
    @classmethod
    def _estimate(cls, v: Any) -> Any:
        return parse_duration(v)


class Window(_Strict):
    """The sliding-window batch policy after the canary batches (engine/window.py)."""
    max_unavailable: int | str                              # nodes in flight at once: 4 or "10%"
    fail_window: int = Field(default=10, ge=1)              # max_fail_percentage over the last N started
    cutoff: float = 0.0                                     # margin before the window's end

    @field_validator("max_unavailable", mode="before")
    @classmethod
    def _max_unavailable(cls, v: Any) -> Any:
        v = _check_serial_item(v)
        if v in (0, "0%"):
            raise ValueError("max_unavailable must let at least one node out")
        return v

    @field_validator("cutoff", mode="before")
    @classmethod
    def _cutoff(cls, v: Any) -> Any:
        return parse_duration(v)


class BatchPause(Pause):
    after_batch: int = Field(ge=1)


class Hook(_Strict):
    """A command run on the controller (the event as JSON on stdin) or a JSON webhook POST."""

    command: list[str] | None = None
    webhook: str | None = None
    timeout: float = 60.0

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return parse_duration(v)

    @field_validator("webhook")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError(f"webhook must be an http:// or https:// URL, got {v!r}")
        return v

    @field_validator("command")
    @classmethod
    def _argv(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or not all(isinstance(a, str) and a for a in v)):
            raise ValueError("command is a non-empty list of arguments (no shell): [/usr/local/bin/notify, --ticket]")
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> Hook:
        if (self.command is None) == (self.webhook is None):
            raise ValueError("a hook has exactly one of `command` or `webhook`")
        return self


class Hooks(_Strict):
    confirm_rollout: list[Hook] = Field(default_factory=list)   # before the first batch; a failure stops it
    pre_batch: list[Hook] = Field(default_factory=list)         # before each batch; a failure stops the rollout
    post_batch: list[Hook] = Field(default_factory=list)        # after each batch (recorded, never blocks)
    on_rollback: list[Hook] = Field(default_factory=list)       # after a node's rollback (recorded)


# The decision after the window (docs/domain.md "Staying power"; checklist item 9), written down
# in advance. ``obs`` is what the observation passes found (k3rollout/engine/observe.py
# lists its keys). Rollback when any ``rollback_when`` holds; keep the new driver when every
# ``keep_when`` holds; otherwise stay on the isolated (upgraded) nodes and keep observing.
DEFAULT_ROLLBACK_WHEN = (
    "obs.recurrence | length > 0",          # the failure the change was made for (or one triaged in the run) is back
    "obs.cuda_failures | length > 0",       # CUDA no longer initialises on an upgraded node
)
DEFAULT_KEEP_WHEN = (
    "obs.passes >= 1",
    "obs.serving_failures | length == 0",   # health and a short request answer
    "not obs.prefix_hits_stopped",          # the repeated prefix still hits
    "obs.prefix_hit_rate is none or obs.run_prefix_hit_rate is none or "
    "obs.prefix_hit_rate >= obs.run_prefix_hit_rate",
    "obs.tool_call_failures | length == 0 and obs.empty_tool_calls | length == 0",
    "obs.restarts | length == 0",           # no serving container restarted since the run left it
    "obs.driver_drift | length == 0 and obs.image_drift | length == 0",   # the environment is the one approved
    "obs.unreachable | length == 0 and obs.nccl_failures | length == 0",
)


class Observe(_Strict):
    """``k3rollout observe``: what to watch after the window, and the decision rules."""

    keep_when: list[Expression] = Field(default_factory=lambda: list(DEFAULT_KEEP_WHEN))
    rollback_when: list[Expression] = Field(default_factory=lambda: list(DEFAULT_ROLLBACK_WHEN))
    # serving containers to check (default: the ones the baseline saw running on the node)
    serving: list[str] | None = None
    prefix_words: int = Field(default=2000, ge=64)
    tool_call: bool = True
    # the NCCL gate, on nodes the scheduler shows idle (nothing runs there)
    nccl: bool = False
    request_timeout: Duration = 120

    @field_validator("keep_when", "rollback_when", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class Stage(_Strict):
    _typed: Any = PrivateAttr(default=None)
    name: str
    stage: StageName
    estimate: float | None = None
    timeout: float | None = None
    pause: Pause | None = None          # once per batch, before this stage starts
    pre: AssertBlock | None = None
    post: AssertBlock | None = None
    rollback: list[RollbackStep] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict, alias="with")

    @field_validator("estimate", "timeout", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        return None if v is None else parse_duration(v)

    @property
    def estimate_s(self) -> float:
        return self.estimate if self.estimate is not None else DEFAULT_ESTIMATES[self.stage]

    def typed_params(self) -> Any:
        # validated once per stage (the model is frozen); every node renders from this
        if self._typed is None:
            self._typed = PARAMS_BY_KIND[self.stage].model_validate(self.params)
        return self._typed


SerialItem = int | str


def _one_at_a_time() -> list[SerialItem]:
    return [1]


def _check_serial_item(v: Any) -> Any:
    if isinstance(v, bool):
        raise ValueError("serial values are integers or percentages like \"25%\"")
    if isinstance(v, int):
        if v < 0:
            raise ValueError("serial values must not be negative")
        return v
    if isinstance(v, str):
        s = v.strip()
        if s.endswith("%") and s[:-1].strip().isdigit():
            return s
        if s.isdigit():
            return int(s)
    raise ValueError(f"serial value {v!r} is neither an integer nor a percentage like \"25%\"")


class Play(_Strict):
    name: str
    hosts: str
    serial: list[SerialItem] = Field(default_factory=_one_at_a_time)
    max_fail_percentage: float = Field(default=0, ge=0, le=100)
    min_serving: int | str = 0
    forks: int = Field(default=100, ge=1, le=4096)   # hosts worked on at once (threads)
    rollback_estimate: float | None = None
    vars: dict[str, Any] = Field(default_factory=dict)
    pauses: list[BatchPause] = Field(default_factory=list)
    hooks: Hooks = Field(default_factory=Hooks)
    # rollback: a failed node is rolled back and uncordoned when healthy; quarantine: rolled
    # back and kept cordoned and labelled, counted against failure_budget
    on_node_failure: Literal["rollback", "quarantine"] = "rollback"
    failure_budget: int | str | None = None     # rollout-wide failed nodes allowed: 3 or "5%"
    # a host var naming the model replica a node serves in (its tensor/expert-parallel
    # group): batches take whole groups, and serial and min_serving count replicas
    group_by: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    prestage: Prestage | None = None
    window: Window | None = None


    observe: Observe = Field(default_factory=Observe)
    # a model profile (playbooks/profiles/NAME.yml or a path relative to the playbook): the plan
    # then works in replicas of that model (plan/replicas.py); overrides merge key by key
    profile: str | None = Field(default=None, min_length=1)
    profile_overrides: dict[str, Any] | None = None
    stages: list[Stage]

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: str) -> str:
        try:
            check_template(v)
        except AssertionSyntaxError as exc:
            raise ValueError(str(exc)) from None
        return v

    def host_pattern(self) -> str:
        """``hosts:`` as Ansible resolves it before it selects hosts: a template such as
        ``"{{ k3_hosts | default('gpu_nodes') }}"`` rendered with the play's vars (``-e``
        is merged over them), so one playbook serves inventories that name their GPU nodes
        differently (``-e k3_hosts=slurm-node``). A list renders as Ansible's comma form."""
        if not templated(self.hosts):
            return self.hosts
        try:
            out = render(self.hosts, dict(self.vars))
        except AssertionSyntaxError as exc:
            raise InputError(f"hosts: {exc}") from None
        pattern = ",".join(str(x) for x in out) if isinstance(out, list) else str(out).strip()
        if not pattern:
            raise InputError(f"hosts: {self.hosts!r} renders to an empty host pattern")
        return pattern

    @field_validator("failure_budget", mode="before")
    @classmethod
    def _budget(cls, v: Any) -> Any:
        return None if v is None else _check_serial_item(v)

    @field_validator("serial", mode="before")
    @classmethod
    def _serial(cls, v: Any) -> Any:
        if v is None:
            return [0]
        items = v if isinstance(v, list) else [v]
        if not items:
            raise ValueError("serial list must not be empty")
        return [_check_serial_item(i) for i in items]

    @field_validator("min_serving", mode="before")
    @classmethod
    def _min_serving(cls, v: Any) -> Any:
        return _check_serial_item(v)

    @field_validator("rollback_estimate", mode="before")
    @classmethod
    def _rb_duration(cls, v: Any) -> Any:
        return None if v is None else parse_duration(v)

    @field_validator("vars")
    @classmethod
    def _var_names(cls, v: dict[str, Any]) -> dict[str, Any]:
        for k in v:
            if not isinstance(k, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
                raise ValueError(f"invalid variable name {k!r}")
            if k in ("facts", "baseline", "vars", "node"):
                raise ValueError(f"variable name {k!r} is reserved")
        return v


class Playbook(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: str
    sha256: str
    play: Play
    profile: Any = None                 # model.profile.ModelProfile when the play names one

    @property
    def stages(self) -> list[Stage]:
        return list(self.play.stages)

    def rollback_actions(self) -> list[RollbackStep]:
        """Each rollback action the stages declare, once, in the order it runs
        (``ROLLBACK_ORDER``); of two declarations of one action the later stage's wins."""
        declared: dict[str, RollbackStep] = {}
        for stage in self.play.stages:
            for rb in stage.rollback:
                declared[rb.action] = rb
        return [declared[a] for a in ROLLBACK_ORDER if a in declared]


def load_playbook(path: str | Path) -> Playbook:
    p = Path(path)
    data = load_yaml(p)
    sp = str(p)
    if data is None:
        raise InputError("playbook is empty: expected a list with one play", path=sp, line=1)
    if isinstance(data, dict):
        raise InputError("a playbook is a YAML list of plays; start the play with '- name: ...'",
                         path=sp, line=getattr(data, "line", 1))
    # LList: a YAML sequence; an !!omap or !!pairs document loads as a plain list of pairs, not plays
    if not isinstance(data, LList) or not data:
        raise InputError("a playbook is a non-empty YAML list of plays", path=sp, line=getattr(data, "line", 1))
    if len(data) != 1:
        raise InputError(f"k3rollout runs one play per playbook; this one has {len(data)}",
                         path=sp, line=data.line_of(1))
    play_data = data[0]
    if not isinstance(play_data, dict):
        raise InputError(f"the play must be a mapping, got {type(play_data).__name__}", path=sp,
                         line=data.line_of(0))
    try:
        play = Play.model_validate(play_data)
    except ValidationError as exc:
        errors = exc.errors()
        err = errors[0]
        loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-after"))]
        line = line_at(play_data, loc) or getattr(play_data, "line", None)
        field = ".".join(str(x) for x in loc) or "play"
        msg = err["msg"].removeprefix("Value error, ")
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise InputError(f"{field}: {msg}{more}", path=sp, line=line) from None
    _check_stages(play, play_data, sp)
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    profile = None
    if play.profile is not None:
        where = resolve_profile_path(play.profile, sp)
        if where is None:
            raise InputError(f"profile: no model profile {play.profile!r} (looked for profiles/{play.profile}.yml "
                             "next to the playbook and among the shipped profiles)", path=sp,
                             line=line_at(play_data, ["profile"]))
        profile = load_profile(where, play_data.get("profile_overrides"), overrides_path=sp,
                               overrides_line=line_at(play_data, ["profile_overrides"]))
        # the profile's prefix-cache block sizes the feature stage's prefix proof, unless the
        # stage names its own
        given = {"prefix_block_tokens": profile.prefix_cache_block_tokens, "agent_turns": profile.agent_turns}
        stages = [st.model_copy(update={"params": {**{k: v for k, v in given.items() if k not in st.params},
                                                   **st.params}})
                  if st.stage == "features" else st for st in play.stages]
        play = play.model_copy(update={"stages": stages})
    elif play.profile_overrides is not None:
        raise InputError("profile_overrides needs a `profile:` to override", path=sp,
                         line=line_at(play_data, ["profile_overrides"]))
    return Playbook(path=sp, sha256=digest, play=play, profile=profile)


def _check_stages(play: Play, play_data: Any, path: str) -> None:
    """Stage order, uniqueness and parameters, with the line of the offending stage."""
    raw = play_data.get("stages") if isinstance(play_data, dict) else None

    def line(i: int | None, *loc: Any) -> int | None:
        if raw is None or i is None:
            return getattr(play_data, "line", None)
        return line_at(raw, [i, *loc]) or raw.line_of(i)

    kinds = [s.stage for s in play.stages]
    if not kinds:
        raise InputError("stages: a play needs stages", path=path, line=line(None))
    for i, k in enumerate(kinds):
        if kinds.index(k) != i:
            raise InputError(f"stages.{i}: stage kind {k!r} appears twice; each stage runs once per node",
                             path=path, line=line(i))
    if not STAGE_TABLES.plays(kinds[0], RECORDS_BASELINE):
        raise InputError(f"stages.0: the first stage must be `{STAGE_TABLES.with_role(RECORDS_BASELINE)}`: evidence "
                         "is captured before anything changes", path=path, line=line(0))
    for i in range(1, len(kinds)):
        if STAGE_ORDER.index(kinds[i]) < STAGE_ORDER.index(kinds[i - 1]):
            raise InputError(f"stages.{i}: `{kinds[i]}` cannot come after `{kinds[i - 1]}`; the order is "
                             + " -> ".join(STAGE_ORDER), path=path, line=line(i))
    out = STAGE_TABLES.index(kinds, TAKES_OUT_OF_SERVICE)
    if "driver_upgrade" in kinds and out is None:
        i = kinds.index("driver_upgrade")
        raise InputError(f"stages.{i}: `driver_upgrade` needs a `{STAGE_TABLES.with_role(TAKES_OUT_OF_SERVICE)}` "
                         "stage before it: never upgrade a node in service", path=path, line=line(i))
    if out is not None and STAGE_TABLES.index(kinds, RETURNS_TO_SERVICE) is None:
        raise InputError(f"stages.{out}: a play that cordons must end with "
                         f"`{STAGE_TABLES.with_role(RETURNS_TO_SERVICE)}`, or nodes stay out of service",
                         path=path, line=line(out))
    if play.window is not None:
        paused = [i for i, st in enumerate(play.stages) if st.pause is not None]
        if paused:
            raise InputError(f"stages.{paused[0]}.pause: a stage gate waits per batch, and `window:` has no batches "
                             "after the canaries; gate with `pauses: [{after_batch: N}]` instead", path=path,
                             line=line(paused[0], "pause"))
        if play.group_by:
            raise InputError("window: the sliding window takes nodes one by one; with `group_by` (whole replicas) "
                             "use serial batches", path=path, line=getattr(play_data, "line", None))
    for i, stage in enumerate(play.stages):
        try:
            params = PARAMS_BY_KIND[stage.stage].model_validate(stage.params)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            raise InputError(f"stages.{i}.with.{where}: {msg}", path=path,
                             line=line(i, "with", *err["loc"])) from None
        if isinstance(params, DriverParams):
            for mgr in ("apt", "dnf"):
                rel = getattr(params.tasks, mgr)
                if rel and not (Path(path).parent / rel).is_file():
                    raise InputError(f"stages.{i}.with.tasks.{mgr}: task file {rel} not found next to the playbook",
                                     path=path, line=line(i, "with", "tasks", mgr))


def play_vars(play: Play) -> dict[str, Any]:
    return {k: plain(v) for k, v in play.vars.items()}


__all__ = ["AssertBlock", "LDict", "Play", "Playbook", "RollbackStep", "Stage", "STAGE_ORDER", "load_playbook"]
