"""Ansible-style ``that:`` assertions and templated parameters, in a Jinja2 sandbox.

Expressions come from the playbook author; variable *values* (inventory vars, host facts)
are data and are never templated again, so a hostile host var cannot inject code. The
sandbox has no access to files, the environment or Python internals, and StrictUndefined
turns a typo into an error instead of a silently false assertion.

The sandbox also bounds what one operation may build: ``'x' * 10**10``, ``10 ** 10**10``,
``'%999999999s' % x`` or ``'x'.center(10**10)`` raise a SecurityError instead of filling
memory (at run time an assertion that fails; at load time, for constant operands, a
playbook error with its line), and ``range`` stays within Jinja2's MAX_RANGE.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from jinja2 import StrictUndefined, TemplateError, UndefinedError, nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_ITEMS = 1_000_000       # characters of a string, items of a list, that one operation may make
MAX_INT_BITS = 4096         # an integer power's result


def _too_big(what: str, size: int) -> SecurityError:
    return SecurityError(f"{what} would make {size:,} items; the sandbox allows {MAX_ITEMS:,}")


_WIDTH = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_format(fmt: str) -> None:
    for m in _WIDTH.finditer(fmt):
        for g in m.groups():
            if g and g.isdigit() and int(g) > MAX_ITEMS:
                raise _too_big(f"format width {g}", int(g))


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """An immutable sandbox whose operators and padding methods cannot build huge values.

    Intercepted operators are not folded at compile time either (Jinja2 leaves them to
    ``call_binop``), so compiling ``'x' * 10**10`` costs nothing; ``bounded_constants``
    checks constant operands at load time."""

    intercepted_binops = frozenset({"*", "**", "%"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, bytes, list, tuple)) and isinstance(n, int) and not isinstance(n, bool):
                    if len(seq) * n > MAX_ITEMS:
                        raise _too_big(f"a {type(seq).__name__} of length {len(seq)} repeated {n} times", len(seq) * n)
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                bits = abs(left).bit_length() * right
                if bits > MAX_INT_BITS:
                    raise SecurityError(f"{left} ** {right} has about {bits:,} bits; the sandbox allows "
                                        f"{MAX_INT_BITS:,}")
        elif operator == "%" and isinstance(left, str):
            _check_format(left)
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        name = getattr(__obj, "__name__", None)
        if isinstance(getattr(__obj, "__self__", None), str) and name in _PADDING:
            width = args[0] if args else kwargs.get("width", kwargs.get("tabsize", 0))
            if isinstance(width, int) and width > MAX_ITEMS:
                raise _too_big(f"str.{name}({width})", width)
        return super().call(__context, __obj, *args, **kwargs)


_PADDING = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})


def _bounded_filter(fn: Any, name: str) -> Any:
    def bounded(value: Any, width: Any = 80, *args: Any, **kwargs: Any) -> Any:
        if isinstance(width, int) and width > MAX_ITEMS:
            raise _too_big(f"the {name} filter with width {width}", width)
        return fn(value, width, *args, **kwargs)

    return bounded


def _vtuple(v: Any) -> tuple[tuple[int, int | str], ...]:
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


def _make_env() -> BoundedSandbox:
    env = BoundedSandbox(undefined=StrictUndefined, autoescape=False)
    for name in ("center", "indent", "wordwrap", "truncate"):
        env.filters[name] = _bounded_filter(env.filters[name], name)
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
        bounded_constants(_parsed("{{ " + expr + " }}"))
    except TemplateError as exc:
        raise AssertionSyntaxError(f"invalid expression {expr!r}: {exc}") from None


def check_template(text: str) -> None:
    if "{" not in text:
        return                      # plain text: nothing to compile
    try:
        _template(text)             # cached: parameters are re-validated for every node
        bounded_constants(_parsed(text))
    except TemplateError as exc:
        raise AssertionSyntaxError(f"invalid template {text!r}: {exc}") from None


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> nodes.Template:
    return ENV.parse(text)


_FOLDABLE = {nodes.Mul: "*", nodes.Pow: "**", nodes.Mod: "%", nodes.Add: "+", nodes.Sub: "-",
             nodes.FloorDiv: "//", nodes.Div: "/"}


def _fold(node: nodes.Node) -> Any:
    """The value of a constant (sub)expression, computed with the sandbox's bounds; raises
    nodes.Impossible when it depends on a variable or a call."""
    if isinstance(node, nodes.Const):
        return node.value
    if isinstance(node, (nodes.List, nodes.Tuple)):
        return [_fold(x) for x in node.items]
    if isinstance(node, nodes.Neg):
        return -_fold(node.node)
    if isinstance(node, nodes.Pos):
        return +_fold(node.node)
    if not isinstance(node, nodes.BinExpr) or type(node) not in _FOLDABLE:
        raise nodes.Impossible()
    op = _FOLDABLE[type(node)]
    left, right = _fold(node.left), _fold(node.right)
    try:
        return ENV.call_binop(None, op, left, right)
    except SecurityError:
        raise
    except Exception:       # noqa: BLE001 - 1/0, 'a' - 1: the run reports it, as before
        raise nodes.Impossible() from None


def bounded_constants(tree: nodes.Template) -> None:
    """Refuse, at load time, a constant operation the sandbox would refuse at run time."""
    for node in tree.find_all(tuple(_FOLDABLE)):
        try:
            _fold(node)
        except nodes.Impossible:
            continue


@dataclass(frozen=True)
class AssertionResult:
    expr: str
    passed: bool
    error: str | None = None
    value: Any = None

    def to_dict(self) -> dict[str, Any]:
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


def template_context(host_vars: dict[str, Any], *, node: str, facts: dict[str, Any],
                     baseline: dict[str, Any]) -> dict[str, Any]:
    """What a template or an assertion sees, wherever it is rendered (a stage's ``pre`` and
    ``post``, its parameters, the driver's vendor steps, the rollback's restore steps): the
    node's vars (play vars over inventory vars) by name and as ``vars``, the node's
    ``facts`` and ``baseline``, and its name as ``node`` and ``inventory_hostname``."""
    return {**host_vars, "facts": facts, "baseline": baseline, "node": node, "inventory_hostname": node,
            "vars": dict(host_vars)}


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
