"""Line-aware YAML loading: every mapping and sequence remembers where it came from.

The loaders use this so a validation error deep in a playbook can still name the file and
line. Only YAML's safe subset is accepted; duplicate keys are an error (YAML allows the
last one to win silently, which hides a typo in a change plan).

Aliases are bounded: a document whose aliases would expand it by more than
``ALIAS_EXPANSION_LIMIT`` values (an "alias bomb": nine levels of nine aliases are 387
million values from 1 KiB) is refused with the line of the collection that expands too
far, before anything walks it. A document without aliases is never limited.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from k3rollout.errors import InputError


class LDict(dict[Any, Any]):
    """A dict that knows the line of itself and of each key (1-based)."""

    line: int = 0
    key_lines: dict[Any, int]

    def line_of(self, key: Any) -> int:
        return self.key_lines.get(key, self.line)


class LList(list[Any]):
    line: int = 0
    item_lines: list[int]

    def line_of(self, index: int) -> int:
        if isinstance(index, int) and 0 <= index < len(self.item_lines):
            return self.item_lines[index]
        return self.line


# libyaml's loader when available (same safe subset, same marks, several times faster)
class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LDict:
    loader.flatten_mapping(node)
    out = LDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "found an unhashable key", key_node.start_mark
            ) from None
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {out.key_lines[key]})",
                key_node.start_mark,
            )
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: _Loader, node: yaml.SequenceNode) -> LList:
    out = LList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.item_lines = [child.start_mark.line + 1 for child in node.value]
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


ALIAS_EXPANSION_LIMIT = 1_000_000     # values aliases may add to a document


class AliasBomb(Exception):
    def __init__(self, node: yaml.Node, size: int):
        super().__init__(size)
        self.node, self.size = node, size


def _expanded_sizes(root: yaml.Node) -> None:
    """Raise AliasBomb at the first collection whose alias-expanded size goes over the
    document's own node count plus ALIAS_EXPANSION_LIMIT (sizes memoized per node, so
    this costs one visit per distinct node)."""
    distinct: set[int] = set()
    todo = [root]
    while todo:
        n = todo.pop()
        if id(n) in distinct:
            continue
        distinct.add(id(n))
        if isinstance(n, yaml.SequenceNode):
            todo.extend(n.value)
        elif isinstance(n, yaml.MappingNode):
            todo.extend(x for kv in n.value for x in kv)
    if len(distinct) == 1:
        return
    limit = len(distinct) + ALIAS_EXPANSION_LIMIT
    size: dict[int, int] = {}
    open_: set[int] = set()          # on the current path: an alias back to one is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        n, children_done = stack.pop()
        if id(n) in size:
            continue
        kids = (n.value if isinstance(n, yaml.SequenceNode) else
                [x for kv in n.value for x in kv] if isinstance(n, yaml.MappingNode) else [])
        if not children_done:
            if id(n) in open_:
                return                   # a recursive alias: the constructor refuses it with its line
            todo_kids = [k for k in kids if id(k) not in size]
            if todo_kids:
                open_.add(id(n))
                stack.append((n, True))
                stack.extend((k, False) for k in todo_kids)
                continue
        open_.discard(id(n))
        total = 1 + sum(size.get(id(k), 1) for k in kids)
        if total > limit:
            raise AliasBomb(n, total)
        size[id(n)] = total


class InvalidYaml(InputError):
    """Text that does not parse as YAML (not an alias bomb, not undecodable bytes)."""


def load_yaml_text(text: str, path: str) -> Any:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if "&" in text:              # no anchor, no alias: nothing to expand
            _expanded_sizes(node)
        return loader.construct_document(node)
    except AliasBomb as bomb:
        raise InputError(f"YAML aliases expand this collection to {bomb.size:,} values (more than "
                         f"{ALIAS_EXPANSION_LIMIT:,} beyond the document itself): refused as an alias bomb",
                         path=path, line=bomb.node.start_mark.line + 1) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or str(exc)
        if exc.context:
            problem = f"{exc.context}: {problem}"
        raise InvalidYaml(f"invalid YAML: {problem}", path=path, line=line) from None
    except yaml.YAMLError as exc:
        raise InvalidYaml(f"invalid YAML: {exc}", path=path) from None
    except RecursionError:
        raise InvalidYaml("invalid YAML: nesting too deep", path=path) from None
    finally:
        loader.dispose()


def check_regular_file(path: Path) -> None:
    """Refuse a FIFO, socket or device (reading one blocks or never ends) and a missing file."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise InputError("file not found", path=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(path)) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a directory, expected a YAML file", path=str(path))
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file (a FIFO, socket or device); refused", path=str(path))


def decode_utf8(raw: bytes, path: str) -> str:
    """``raw`` as text; a byte that is not UTF-8 is named by line and column."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(f"not UTF-8 text (byte {exc.start}, column {column} of the line: "
                         f"{raw[exc.start:exc.start + 1]!r})", path=path, line=line) from None


def load_yaml(path: Path) -> Any:
    check_regular_file(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError("file not found", path=str(path)) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a YAML file", path=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", path=str(path)) from None
    return load_yaml_text(decode_utf8(raw, str(path)), str(path))


def line_at(data: Any, loc: Iterable[Any]) -> int | None:
    """The line of the deepest node of ``data`` that ``loc`` (a pydantic error loc) reaches."""
    line = getattr(data, "line", None) or None
    node = data
    for part in loc:
        if isinstance(node, LDict) and part in node:
            line = node.line_of(part)
            node = node[part]
        elif isinstance(node, LList) and isinstance(part, int) and 0 <= part < len(node):
            line = node.line_of(part)
            node = node[part]
        else:
            break
        inner = getattr(node, "line", None)
        if inner and not isinstance(node, LList):
            line = line or inner
    return line


def plain(data: Any) -> Any:
    """Strip line info: LDict/LList -> dict/list, recursively."""
    if isinstance(data, dict):
        return {k: plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [plain(v) for v in data]
    return data
