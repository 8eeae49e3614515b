"""A model profile: what it takes to serve one model, as data (``playbooks/profiles/*.yml``).

A playbook names a profile (``profile: kimi-k3``) and may override any part of it
(``profile_overrides:``, merged key by key; a list replaces the list). The profile holds the
model's footprint, the published parallel layouts with their minimum GPUs, the launch
arguments and environment per GPU generation, the parsers, the all-to-all backend per
interconnect, the prefix-cache block size and the engine-ready timeout. The planner
(``plan/replicas.py``) turns it and each node's GPUs into replicas.

Every error names the file and line: the profile's own, or the playbook's when the value
came from ``profile_overrides``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from k3rollout.errors import InputError
from k3rollout.model.yamlsrc import line_at, load_yaml, plain
from k3rollout.resources import shipped

GB = 1e9
GIB = float(1 << 30)
Generation = Literal["hopper", "blackwell"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Footprint(_Strict):
    weights_gb: float = Field(gt=0)
    vram_minimum_gb: float = Field(gt=0)            # what a replica's usable GPU memory must hold
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)

    @model_validator(mode="after")
    def _weights_fit_minimum(self) -> Footprint:
        if self.vram_minimum_gb < self.weights_gb:
            raise ValueError(f"vram_minimum_gb {self.vram_minimum_gb:g} is below weights_gb {self.weights_gb:g}: "
                             "the weights alone would not fit")
        return self

    @property
    def need_gib(self) -> float:
        return self.vram_minimum_gb * GB / GIB


class Layout(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    dp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    min_gpus: int = Field(ge=1)
    hardware: list[str] = Field(min_length=1)        # GPU models this layout is published for
    source: str = ""                                  # who publishes it, and how vLLM runs it

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @model_validator(mode="after")
    def _consistent(self) -> Layout:
        if self.min_gpus != self.gpus:
            raise ValueError(f"layout {self.name}: min_gpus {self.min_gpus} is not tp*pp*dp = "
                             f"{self.tp}*{self.pp}*{self.dp} = {self.gpus}")
        if self.ep > 1 and self.ep != self.tp * self.dp:
            raise ValueError(f"layout {self.name}: ep {self.ep} must equal tp*dp = {self.tp * self.dp} "
                             "(vLLM's expert-parallel size)")
        return self


class Launch(_Strict):
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, v: Any) -> Any:
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(x, str):
                    raise ValueError(f"env {k}: values are strings (quote {x!r})")
        return v


class Launches(_Strict):
    base: Launch = Field(default_factory=Launch)
    hopper: Launch = Field(default_factory=Launch)
    blackwell: Launch = Field(default_factory=Launch)


class Parsers(_Strict):
    args: list[str] = Field(default_factory=list)


class All2All(_Strict):
    rdma: str
    nvlink: str


class ModelProfile(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    model: str
    footprint: Footprint
    generations: dict[Generation, list[str]]
    layouts: list[Layout] = Field(min_length=1)
    layout: str | None = None                 # pin a layout by name (the plan refuses it if it cannot hold the model)
    launch: Launches = Field(default_factory=Launches)
    parsers: Parsers = Field(default_factory=Parsers)
    all2all: All2All
    prefix_cache_block_tokens: int = Field(ge=16)
    engine_ready_timeout_s: float = Field(gt=0)
    agent_turns: int = Field(default=0, ge=0, le=4)      # tool calls of the feature stage's agent loop
    path: str = ""
    sha256: str = ""

    @model_validator(mode="after")
    def _names(self) -> ModelProfile:
        names = [lay.name for lay in self.layouts]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"layout name(s) appear twice: {', '.join(dup)}")
        return self

    @field_validator("layout")
    @classmethod
    def _known_layout(cls, v: str | None, info: ValidationInfo) -> str | None:
        names = [lay.name for lay in info.data.get("layouts") or []]
        if v is not None and names and v not in names:
            raise ValueError(f"layout {v!r} is not one of the profile's layouts: {', '.join(names)}")
        return v

    def generation(self, gpu_model: str) -> str | None:
        """hopper/blackwell for a GPU name such as 'NVIDIA H200' (a model is a whole word)."""
        for gen, models in self.generations.items():
            if any(gpu_matches(gpu_model, m) for m in models):
                return gen
        return None

    def layouts_for(self, gpu_model: str) -> list[Layout]:
        """The layouts published for this GPU, smallest first."""
        return sorted((lay for lay in self.layouts if any(gpu_matches(gpu_model, h) for h in lay.hardware)),
                      key=lambda lay: lay.gpus)

    def launch_for(self, gpu_model: str) -> Launch:
        """Base arguments, then the generation's, then the parsers; environment merged the same way."""
        gen = self.generation(gpu_model)
        extra = getattr(self.launch, gen) if gen else Launch()
        return Launch(args=[*override_flags(self.launch.base.args, extra.args), *extra.args, *self.parsers.args],
                      env={**self.launch.base.env, **extra.env})

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "path": self.path, "sha256": self.sha256,
                "need_gib": round(self.footprint.need_gib, 1), "layout": self.layout,
                "prefix_cache_block_tokens": self.prefix_cache_block_tokens,
                "engine_ready_timeout_s": self.engine_ready_timeout_s}


def override_flags(base: list[str], extra: list[str]) -> list[str]:
    """``base`` without the flags ``extra`` sets again (with their values), so the generation's
    ``--moe-backend marlin`` replaces the base ``--moe-backend auto`` instead of following it."""
    again = {a for a in extra if a.startswith("--")}
    out: list[str] = []
    skip = False
    for i, a in enumerate(base):
        if skip:
            skip = False
            continue
        if a in again:
            skip = i + 1 < len(base) and not base[i + 1].startswith("--")
            continue
        out.append(a)
    return out


def gpu_matches(gpu_name: str, model: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(model)}(?![A-Za-z0-9])", gpu_name, re.IGNORECASE) is not None


def merge(base: Any, over: Any) -> Any:
    """``over`` on top of ``base``: mappings merge key by key, anything else replaces."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base.get(k), v) if k in base else v
        return out
    return over


def _has(data: Any, loc: list[Any]) -> bool:
    for p in loc:
        if isinstance(data, dict) and p in data:
            data = data[p]
        elif isinstance(data, list) and isinstance(p, int) and 0 <= p < len(data):
            data = data[p]
        else:
            return False
    return True


def resolve_profile_path(name: str, playbook_path: str | Path) -> Path | None:
    """A path (relative to the playbook) or a name: ``profiles/NAME.yml`` next to the playbook,
    then the profiles k3rollout ships."""
    base = Path(playbook_path).parent
    if name.endswith((".yml", ".yaml")) or "/" in name:
        p = Path(name) if Path(name).is_absolute() else base / name
        return p if p.is_file() else None
    for p in (base / "profiles" / f"{name}.yml", shipped("playbooks", "profiles", f"{name}.yml")):
        if p.is_file():
            return p
    return None


def load_profile(path: str | Path, overrides: Any = None, *, overrides_path: str | None = None,
                 overrides_line: int | None = None) -> ModelProfile:
    """Load a profile file, apply a playbook's overrides, validate once."""
    p = Path(path)
    sp = str(p)
    data = load_yaml(p)
    if not isinstance(data, dict):
        raise InputError("a model profile is a YAML mapping (name:, model:, footprint:, layouts: ...)", path=sp,
                         line=getattr(data, "line", 1))
    if overrides is not None and not isinstance(overrides, dict):
        raise InputError("profile_overrides must be a mapping of profile keys", path=overrides_path,
                         line=overrides_line)
    over = overrides or {}
    for k in ("path", "sha256"):
        for src, where, line in ((data, sp, getattr(data, "line_of", lambda _k: 1)(k)),
                                 (over, overrides_path, getattr(over, "line_of", lambda _k: overrides_line)(k))):
            if k in src:
                raise InputError(f"{k}: set by the loader, not by the file", path=where, line=line)
    merged = merge(plain(data), plain(over))
    try:
        prof = ModelProfile.model_validate(merged)
    except ValidationError as exc:
        errors = exc.errors()
        err = errors[0]
        loc = [x for x in err["loc"] if not (isinstance(x, str) and x.startswith(("function-", "literal")))]
        field = ".".join(str(x) for x in loc) or "profile"
        msg = err["msg"].removeprefix("Value error, ")
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        if over and loc and _has(over, loc[:1]) and (_has(over, loc) or not _has(data, loc)):
            line = line_at(over, loc) or getattr(over, "line", None) or overrides_line
            raise InputError(f"profile_overrides.{field}: {msg}{more}", path=overrides_path, line=line) from None
        line = line_at(data, loc) or getattr(data, "line", 1)
        raise InputError(f"profile {field}: {msg}{more}", path=sp, line=line) from None
    digest = hashlib.sha256(p.read_bytes() + json.dumps(plain(over), sort_keys=True).encode()).hexdigest()
    return prof.model_copy(update={"path": sp, "sha256": digest})
