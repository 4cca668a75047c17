"""Avro schema compatibility, by the Avro spec's resolution rules. Pure, no dependencies.

BACKWARD: a reader with the NEW schema can read data written with the OLD one. The rules
checked (reader = new, writer = old):

- same primitive, or a promotion of the writer's: int to long, float or double; long to
  float or double; float to double; string to bytes and bytes to string;
- a logical type must not change (Avro would resolve ``timestamp-millis`` as
  ``timestamp-micros`` silently; we refuse, unlike Confluent);
- records: same unqualified name (or the writer's name among the reader's aliases); a reader
  field missing from the writer needs a default that fits the field's type (for a union,
  its first branch); a writer field the reader dropped is skipped; fields match by name or
  by the reader field's aliases; nested and recursive records are checked once per pair;
- enums: same name; every writer symbol is a reader symbol, or the reader has a default;
- fixed: same name and size; arrays: items; maps: values;
- unions: every branch the writer could have written must be readable; a non-union writer
  needs some reader branch that reads it.

BACKWARD_TRANSITIVE: the newest version reads data written with every earlier one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "float", "double"}),
    "long": frozenset({"float", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
"""Writer type -> reader types that can read it besides its own."""
NAMED = frozenset({"record", "error", "enum", "fixed"})
_KINDS = NAMED | PRIMITIVES | {"array", "map"}
LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE")


def _fullname(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


class _Names:
    """The named types (records, enums, fixed) a schema defines, by full name."""

    def __init__(self, schema: Any) -> None:
        self.types: dict[str, tuple[dict[str, Any], str]] = {}
        self._walk(schema, "")

    def _walk(self, node: Any, ns: str) -> None:
        if isinstance(node, list):
            for branch in node:
                self._walk(branch, ns)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in NAMED:
                full = _fullname(str(node["name"]), str(node.get("namespace", ns)))
                ns = full.rpartition(".")[0]
                self.types[full] = (node, ns)
                for f in node.get("fields", ()):
                    self._walk(f["type"], ns)
            elif kind == "array":
                self._walk(node["items"], ns)
            elif kind == "map":
                self._walk(node["values"], ns)
            elif isinstance(kind, dict | list):
                self._walk(kind, ns)

    def resolve(self, node: Any, ns: str) -> tuple[Any, str]:
        """Follow name references (and ``{"type": <schema>}`` wrappers) to a definition."""
        while True:
            if isinstance(node, str) and node not in PRIMITIVES:
                found = self.types.get(_fullname(node, ns)) or self.types.get(node)
                if found is None:
                    raise ValueError(f"unknown type name {node!r}")
                node, ns = found
            elif isinstance(node, dict) and (not isinstance(node.get("type"), str)
                                             or node["type"] not in _KINDS):  # {"type": <schema>}
                node = node["type"]
            elif isinstance(node, dict) and node["type"] in NAMED:  # its fields live in its namespace
                full = _fullname(str(node["name"]), str(node.get("namespace", ns)))
                return node, full.rpartition(".")[0]
            else:
                return node, ns


def _kind(node: Any) -> str:
    if isinstance(node, list):
        return "union"
    if isinstance(node, str):
        return node
    return "record" if node["type"] == "error" else str(node["type"])


def _logical(node: Any) -> str | None:
    return node.get("logicalType") if isinstance(node, dict) else None


def _describe(node: Any) -> str:
    if isinstance(node, dict) and node.get("type") in NAMED:
        return f"{_kind(node)} {node['name']}"
    return _kind(node)


def _short(name: str) -> str:
    return name.rpartition(".")[2]


class _Checker:
    def __init__(self, reader: Any, writer: Any) -> None:
        self.reader_names, self.writer_names = _Names(reader), _Names(writer)
        self.active: set[tuple[int, int]] = set()

    def check(self, reader: Any, r_ns: str, writer: Any, w_ns: str, path: str) -> list[str]:
        reader, r_ns = self.reader_names.resolve(reader, r_ns)
        writer, w_ns = self.writer_names.resolve(writer, w_ns)
        if isinstance(writer, list):
            out: list[str] = []
            for i, branch in enumerate(writer):
                out += self.check(reader, r_ns, branch, w_ns, f"{path}[branch {i}]")
            return out
        if isinstance(reader, list):
            for branch in reader:
                if not self.check(branch, r_ns, writer, w_ns, path):
                    return []
            return [f"{path}: no branch of the reader's union can read the writer's {_describe(writer)}"]
        r_kind, w_kind = _kind(reader), _kind(writer)
        if r_kind != w_kind and r_kind not in PROMOTIONS.get(w_kind, ()):
            return [f"{path}: type changed from {_describe(writer)} to {_describe(reader)}"]
        if _logical(reader) != _logical(writer):
            return [f"{path}: logical type changed from {_logical(writer)} to {_logical(reader)}"]
        if r_kind in NAMED:
            names = {_short(str(reader["name"]))} | {_short(a) for a in reader.get("aliases", ())}
            if _short(str(writer["name"])) not in names:
                return [f"{path}: {r_kind} name changed from {writer['name']} to {reader['name']}"]
        if r_kind == "record":
            return self._record(reader, r_ns, writer, w_ns, path)
        if r_kind == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                return [f"{path}: enum {reader['name']} lost symbol(s) {missing} and has no default"]
        elif r_kind == "fixed" and reader["size"] != writer["size"]:
            return [f"{path}: fixed {reader['name']} size changed from {writer['size']} to {reader['size']}"]
        elif r_kind == "array":
            return self.check(reader["items"], r_ns, writer["items"], w_ns, f"{path}[]")
        elif r_kind == "map":
            return self.check(reader["values"], r_ns, writer["values"], w_ns, f"{path}{{}}")
        return []

    def _record(self, reader: dict[str, Any], r_ns: str, writer: dict[str, Any], w_ns: str,
                path: str) -> list[str]:
        pair = (id(reader), id(writer))
        if pair in self.active:  # a recursive type being checked: assume it reads (coinduction)
            return []
        self.active.add(pair)
        try:
            return self._fields(reader, r_ns, writer, w_ns, path)
        finally:
            self.active.discard(pair)

    def _fields(self, reader: dict[str, Any], r_ns: str, writer: dict[str, Any], w_ns: str,
                path: str) -> list[str]:
        by_name = {f["name"]: f for f in writer.get("fields", ())}
        out: list[str] = []
        for field in reader.get("fields", ()):
            where = f"{path}.{field['name']}"
            names = [field["name"], *field.get("aliases", ())]
            match = next((by_name[n] for n in names if n in by_name), None)
            if match is not None:
                out += self.check(field["type"], r_ns, match["type"], w_ns, where)
            elif "default" not in field:
                out.append(f"{where}: field added without a default (data written with the old "
                           "schema has no value for it)")
            elif not self.fits(field["type"], r_ns, field["default"]):
                out.append(f"{where}: default {field['default']!r} does not fit the field's type")
        return out

    def fits(self, node: Any, ns: str, value: Any) -> bool:
        """Whether ``value`` is a valid JSON default for ``node`` (a union: its first branch)."""
        node, ns = self.reader_names.resolve(node, ns)
        kind = _kind(node)
        if kind == "union":
            return bool(node) and self.fits(node[0], ns, value)
        checks: dict[str, bool] = {
            "null": value is None,
            "boolean": isinstance(value, bool),
            "int": isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31,
            "long": isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63,
            "float": isinstance(value, int | float) and not isinstance(value, bool),
            "double": isinstance(value, int | float) and not isinstance(value, bool),
            "string": isinstance(value, str),
            "bytes": isinstance(value, str),
        }
        if kind in checks:
            return checks[kind]
        if kind == "enum":
            return value in node["symbols"]
        if kind == "fixed":
            return isinstance(value, str) and len(value) == node["size"]
        if kind == "array":
            return isinstance(value, list) and all(self.fits(node["items"], ns, v) for v in value)
        if kind == "map":
            return isinstance(value, dict) and all(self.fits(node["values"], ns, v) for v in value.values())
        if kind == "record":
            return isinstance(value, dict) and all(
                self.fits(f["type"], ns, value[f["name"]]) if f["name"] in value else "default" in f
                for f in node.get("fields", ()))
        return False


def backward_problems(new: Any, old: Any) -> list[str]:
    """Why a reader with schema ``new`` cannot read data written with ``old`` (empty: it can).

    Schemas are their parsed JSON (dicts, lists, strings), as in an ``.avsc`` file.
    """
    try:
        return _Checker(new, old).check(new, "", old, "", _root_name(new))
    except (KeyError, TypeError, ValueError) as exc:
        return [f"not a valid Avro schema: {type(exc).__name__}: {exc}"]


def _root_name(schema: Any) -> str:
    return str(schema["name"]) if isinstance(schema, dict) and "name" in schema else _kind_safe(schema)


def _kind_safe(schema: Any) -> str:
    try:
        return _kind(schema)
    except (KeyError, TypeError):
        return "schema"


def is_backward_compatible(new: Any, old: Any) -> bool:
    return not backward_problems(new, old)


def compatibility_problems(new: Any, earlier: Sequence[Any], level: str = "BACKWARD_TRANSITIVE") -> list[str]:
    """Why ``new`` may not follow ``earlier`` (oldest first) under a Confluent compatibility level."""
    level = level.upper()
    if level not in LEVELS:
        raise ValueError(f"unknown compatibility level {level!r}; one of {list(LEVELS)}")
    if level == "NONE" or not earlier:
        return []
    olds = list(enumerate(earlier, 1))
    if not level.endswith("_TRANSITIVE"):
        olds = olds[-1:]
    out: list[str] = []
    for number, old in olds:
        if level.startswith(("BACKWARD", "FULL")):
            out += [f"version {number} -> new (backward): {p}" for p in backward_problems(new, old)]
        if level.startswith(("FORWARD", "FULL")):
            out += [f"new -> version {number} (forward): {p}" for p in backward_problems(old, new)]
    return out


def backward_transitive_problems(versions: Sequence[Any]) -> list[str]:
    """Why the last of ``versions`` (oldest first) cannot read data written with an earlier one."""
    if not versions:
        return []
    return compatibility_problems(versions[-1], versions[:-1], "BACKWARD_TRANSITIVE")
