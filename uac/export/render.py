"""Rendering values as Python source, safely and deterministically.

Every string that reaches generated code (user ids, entity ids, attribute
values, messages) is untrusted: it only ever appears through :func:`literal`
(``repr``), in a comment through :func:`comment`, or in a docstring through
:func:`docstring`, none of which can end the literal or the line early.
"""

from __future__ import annotations

import keyword
import math
from collections.abc import Mapping
from datetime import UTC, date, datetime
from typing import Any

from uac.errors import ExportError

INDENT = "    "


def literal(value: Any) -> str:
    """Python source for a value: None, bool, int, float, str, date, datetime, tuple, list,
    dict (keys in the given order). Dates and datetimes use ``datetime.`` names."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return repr(int(value))
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return repr(str(value))
    if isinstance(value, datetime):
        return repr(value.astimezone(UTC) if value.tzinfo is not None else value)
    if isinstance(value, date):
        return repr(date(value.year, value.month, value.day))
    if isinstance(value, tuple):
        items = [literal(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, list):
        return f"[{', '.join(literal(v) for v in value)}]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    raise ExportError(f"cannot render a {type(value).__name__} as Python source")


def _float(value: float) -> str:
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else '-float("inf")'
    return repr(float(value))


def sorted_json(value: Any) -> Any:
    """A JSON value with every dict's keys sorted, recursively (for deterministic output)."""
    if isinstance(value, Mapping):
        return {str(k): sorted_json(value[k]) for k in sorted(value, key=str)}
    if isinstance(value, list | tuple):
        return [sorted_json(v) for v in value]
    return value


def one_line(text: str, limit: int = 120) -> str:
    """Whitespace collapsed to single spaces, non-printables dropped, cut to ``limit``."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def comment(text: str) -> str:
    """A ``# ...`` comment of one line (empty string for empty text)."""
    flat = one_line(text, 200)
    return f"  # {flat}" if flat else ""


def docstring(text: str, indent: str = "") -> str:
    """A one-line docstring statement; falls back to ``repr`` for text a docstring can't hold."""
    flat = one_line(text, 200)
    if '"' in flat or "\\" in flat:
        return indent + repr(flat)
    return f'{indent}"""{flat}"""'


def block(name: str, annotation: str, entries: list[tuple[str, str]], indent: str = "") -> str:
    """``name: annotation = {`` one ``key: value,`` line per entry ``}`` (keys, values: source)."""
    if not entries:
        return f"{indent}{name}: {annotation} = {{}}\n"
    lines = [f"{indent}{name}: {annotation} = {{"]
    lines += [f"{indent}{INDENT}{k}: {v}," for k, v in entries]
    lines.append(f"{indent}}}")
    return "\n".join(lines) + "\n"


def is_identifier(name: str) -> bool:
    """A plain Python identifier that is not a keyword (safe as a module or class name)."""
    return name.isidentifier() and not keyword.iskeyword(name) and name.isascii()
