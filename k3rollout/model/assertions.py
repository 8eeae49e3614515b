"""Ansible-style ``that:`` assertions and templated parameters, in a Jinja2 sandbox.

Expressions come from the playbook author; variable *values* (inventory vars, host facts)
are data and are never templated again, so a hostile host var cannot inject code. The
sandbox has no access to files, the environment or Python internals, and StrictUndefined
turns a typo into an error instead of a silently false assertion.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, TemplateError, UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def _vtuple(v: Any) -> tuple:
    parts = re.findall(r"\d+|[A-Za-z]+", str(v))
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


def _version_test(value: Any, other: Any, op: str = "==") -> bool:
    """Ansible's ``version`` test (loose ordering): ``driver is version('580', '>=')``."""
    a, b = _vtuple(value), _vtuple(other)
    ops = {"<": a < b, "lt": a < b, "<=": a <= b, "le": a <= b, ">": a > b, "gt": a > b,
           ">=": a >= b, "ge": a >= b, "==": a == b, "=": a == b, "eq": a == b,
           "!=": a != b, "<>": a != b, "ne": a != b}
    if op not in ops:
        raise TemplateError(f"version test: unknown operator {op!r}")
    return ops[op]


def _regex_test(value: Any, pattern: str) -> bool:
    return re.search(pattern, str(value)) is not None


def _make_env() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    env.tests["version"] = _version_test
    env.tests["version_compare"] = _version_test
    env.tests["search"] = _regex_test
    env.tests["match"] = lambda v, p: re.match(p, str(v)) is not None
    env.filters["branch"] = lambda v: int(str(v).split(".")[0])
    env.filters["apt_pin"] = lambda p: f"{p['name']}={p['version']}"
    env.filters["dnf_pin"] = lambda p: f"{p['name']}-{p['version']}"
    env.filters["bool"] = lambda v: str(v).lower() in ("1", "true", "yes", "on") if not isinstance(v, bool) else v
    return env


ENV = _make_env()


class AssertionSyntaxError(ValueError):
    pass


def check_expression(expr: str) -> None:
    """Compile once at load time so a syntax error is reported with its playbook line."""
    if "{{" in expr or "{%" in expr:
        raise AssertionSyntaxError(f"write `that:` entries as bare expressions, without {{{{ }}}}: {expr!r}")
    try:
        _compiled(expr)
    except TemplateError as exc:
        raise AssertionSyntaxError(f"invalid expression {expr!r}: {exc}") from None


def check_template(text: str) -> None:
    if "{" not in text:
        return                      # plain text: nothing to compile
    try:
        _template(text)             # cached: parameters are re-validated for every node
    except TemplateError as exc:
        raise AssertionSyntaxError(f"invalid template {text!r}: {exc}") from None


@dataclass(frozen=True)
class AssertionResult:
    expr: str
    passed: bool
    error: str | None = None
    value: Any = None

    def to_dict(self) -> dict:
        return {"that": self.expr, "passed": self.passed, "error": self.error}


@functools.lru_cache(maxsize=4096)
def _compiled(expr: str) -> Any:
    return ENV.compile_expression(expr, undefined_to_none=False)


@functools.lru_cache(maxsize=4096)
def _template(text: str) -> Any:
    return ENV.from_string(text)


def evaluate(expr: str, context: dict[str, Any]) -> AssertionResult:
    """True/False for one expression; an undefined name or a runtime error is a failure."""
    return evaluate_all([expr], context)[0]


def evaluate_all(exprs: list[str], context: dict[str, Any]) -> list[AssertionResult]:
    """``evaluate`` for each expression of a block, against one context: the variables
    are merged with the sandbox's globals once for the block, not once per expression
    (Jinja2 copies every global and variable into each new context it makes)."""
    names = {**ENV.globals, **context}
    return [_evaluate(e, context, names) for e in exprs]


def _run(expr: str, context: dict[str, Any], names: dict[str, Any]) -> Any:
    fn = _compiled(expr)
    tmpl = getattr(fn, "_template", None)
    if tmpl is None or tmpl.globals.maps[:-1] != [{}]:
        return fn(**context)            # what TemplateExpression.__call__ does, with its own copy
    ctx = tmpl.new_context(names, shared=True)      # read-only: an expression cannot assign
    for _ in tmpl.root_render_func(ctx):
        pass
    return ctx.vars["result"]


def _evaluate(expr: str, context: dict[str, Any], names: dict[str, Any]) -> AssertionResult:
    try:
        value = _run(expr, context, names)
        if isinstance(value, StrictUndefined):  # pragma: no cover - defensive
            raise UndefinedError(f"{expr} is undefined")
        return AssertionResult(expr, bool(value), None, value)
    except UndefinedError as exc:
        return AssertionResult(expr, False, f"undefined: {exc}")
    except (TemplateError, TypeError, ValueError, ArithmeticError, AttributeError, KeyError) as exc:
        return AssertionResult(expr, False, f"{type(exc).__name__}: {exc}")


_WHOLE = re.compile(r"^\{\{(.*)\}\}$", re.S)


def templated(value: Any) -> bool:
    """Whether a parameter value holds a template anywhere inside (what ``render`` changes)."""
    if isinstance(value, str):
        return "{{" in value or "{%" in value
    if isinstance(value, (list, tuple)):
        return any(templated(v) for v in value)
    if isinstance(value, dict):
        return any(templated(v) for v in value.values())
    return False


def render(value: Any, context: dict[str, Any]) -> Any:
    """Render templates inside a (nested) parameter value; non-strings pass through.

    A string that is one whole ``{{ expr }}`` keeps the expression's type, so
    ``"{{ baseline.driver_packages | map('apt_pin') | list }}"`` renders to a list that
    ``render_argv`` splices as separate arguments (never re-split by a shell).
    """
    if isinstance(value, str):
        if not templated(value):
            return value
        m = _WHOLE.match(value.strip())
        if m and "{{" not in m.group(1) and "}}" not in m.group(1):
            try:
                out = _compiled(m.group(1).strip())(**context)
            except TemplateError as exc:
                raise AssertionSyntaxError(f"cannot render {value!r}: {exc}") from None
            if isinstance(out, StrictUndefined):
                raise AssertionSyntaxError(f"cannot render {value!r}: undefined")
            if isinstance(out, (list, tuple)):
                return [str(x) for x in out]
            return str(out) if not isinstance(out, (int, float, bool, dict)) else out
        try:
            return _template(value).render(**context)
        except TemplateError as exc:
            raise AssertionSyntaxError(f"cannot render {value!r}: {exc}") from None
    if isinstance(value, list):
        return [render(v, context) for v in value]
    if isinstance(value, dict):
        return {k: render(v, context) for k, v in value.items()}
    return value


def render_argv(argv: list[str], context: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for arg in argv:
        val = render(arg, context)
        if isinstance(val, list):
            out.extend(str(v) for v in val)
        else:
            out.append(str(val))
    return out
