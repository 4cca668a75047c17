"""The domain catalog: every entity type, its fields, units and natural key. Pure: no I/O.

Entity models are frozen dataclasses registered with :func:`entity`. The catalog
validates attributes (coercing text dates and numbers), derives entity ids from
natural keys, builds typed objects from folded state, and is what an extractor
prompt, the DuckDB tables and an export are generated from.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, TypeVar

from uac.domains.facts import JsonValue, derive_id, iso, to_utc
from uac.errors import ValidationError

GENERIC_TYPE = "entity"
"""The entity type for anything no domain model describes; no fact is dropped for lack of a type."""

_SCALARS: dict[type, str] = {
    str: "str", int: "int", float: "float", bool: "bool", date: "date", datetime: "datetime",
}
SQL_TYPES = {
    "str": "VARCHAR", "int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN",
    "date": "DATE", "datetime": "TIMESTAMP", "list": "VARCHAR[]", "json": "JSON",
}


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One typed field of an entity type."""

    name: str
    kind: str  # one of SQL_TYPES' keys
    description: str = ""
    unit: str | None = None


@dataclass(frozen=True, slots=True)
class EntityType:
    """An entity type: its name, domain, table, model class, fields and natural key."""

    name: str
    domain: str
    table: str
    model: type
    fields: tuple[FieldSpec, ...]
    key: tuple[str, ...]
    description: str

    def field(self, name: str) -> FieldSpec | None:
        for spec in self.fields:
            if spec.name == name:
                return spec
        return None


_REGISTRY: dict[str, EntityType] = {}
T = TypeVar("T")


def _kind_of(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _kind_of(args[0])
    if origin in (list, tuple):
        return "list"
    if origin is dict or annotation is dict:
        return "json"
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    raise TypeError(f"unsupported field type {annotation!r}")


def entity(
    name: str, *, domain: str, table: str, key: tuple[str, ...]
) -> Callable[[type[T]], type[T]]:
    """Register a frozen dataclass as the model of entity type ``name``.

    Field metadata may carry ``unit`` and ``doc``; the class docstring describes the type.
    """

    def register(cls: type[T]) -> type[T]:
        hints = typing.get_type_hints(cls)
        specs = tuple(
            FieldSpec(f.name, _kind_of(hints[f.name]), f.metadata.get("doc", ""),
                      f.metadata.get("unit"))
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        )
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else name
        _REGISTRY[name] = EntityType(name, domain, table, cls, specs, key, doc)
        return cls

    return register


def meta(doc: str, unit: str | None = None) -> dict[str, Any]:
    """Field metadata for :func:`dataclasses.field`: a description and an optional unit."""
    return {"doc": doc, "unit": unit}


def entity_types() -> tuple[EntityType, ...]:
    """Every registered entity type, in a stable order (domain, then name)."""
    _load_domains()
    return tuple(sorted(_REGISTRY.values(), key=lambda t: (t.domain, t.name)))


def get_type(name: str) -> EntityType | None:
    _load_domains()
    return _REGISTRY.get(name)


def _load_domains() -> None:
    if not _REGISTRY:
        import uac.domains.models  # noqa: F401  (registers the built-in types)


def _coerce(spec: FieldSpec, value: JsonValue, where: str) -> JsonValue:
    if value is None:
        return None
    kind = spec.kind
    try:
        if kind == "str":
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise TypeError
            return str(value)
        if kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "yes", "false", "no"):
                return value.lower() in ("true", "yes")
            raise TypeError
        if kind in ("int", "float"):
            if isinstance(value, bool):
                raise TypeError
            number = float(value) if kind == "float" else int(str(value))
            if kind == "float" and number != number:  # NaN
                raise ValueError
            return number
        if kind == "date":
            if not isinstance(value, str):
                raise TypeError
            return date.fromisoformat(value[:10]).isoformat()
        if kind == "datetime":
            if not isinstance(value, str):
                raise TypeError
            return iso(to_utc(value))
        if kind == "list":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TypeError
            return list(value)
        if kind == "json":
            return value
    except (TypeError, ValueError, OverflowError):
        pass
    raise ValidationError(
        f"field {spec.name!r} must be {kind}, got {value!r}", where=where
    )


def validate_attributes(
    entity_type: str, attributes: Mapping[str, JsonValue], where: str = "attributes"
) -> dict[str, JsonValue]:
    """Check and coerce attributes for ``entity_type``; unknown fields are kept as they are.

    Dates become ``YYYY-MM-DD``, datetimes canonical UTC text, numbers numbers.
    Raises :class:`ValidationError` naming the field and the value.
    """
    etype = get_type(entity_type)
    out: dict[str, JsonValue] = {}
    for name, value in attributes.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValidationError(f"attribute name {name!r} is not an identifier", where=where)
        spec = etype.field(name) if etype else None
        out[name] = _coerce(spec, value, where) if spec else value
    return out


def derive_entity_id(entity_type: str, attributes: Mapping[str, JsonValue], fallback: str) -> str:
    """An entity id from the type's natural key (lower-cased), or from ``fallback`` (a source id)."""
    etype = get_type(entity_type)
    if etype and etype.key and all(attributes.get(k) not in (None, "") for k in etype.key):
        parts = [str(attributes[k]).strip().lower() for k in etype.key]
        return "-".join(p.replace(" ", "-") for p in parts)[:80] if len(parts) <= 2 else derive_id(
            *parts, size=8)
    return "e-" + derive_id(entity_type, fallback, size=8)


def _typed(spec: FieldSpec, value: JsonValue) -> Any:
    """The typed value of a stored attribute; None where it does not fit the field."""
    if value is None:
        return None
    try:
        return _coerce_typed(spec.kind, value)
    except (TypeError, ValueError, OverflowError):
        return None


def _coerce_typed(kind: str, value: JsonValue) -> Any:
    if kind == "date":
        return date.fromisoformat(str(value)[:10])
    if kind == "datetime":
        return to_utc(str(value))
    if kind == "list":
        return tuple(str(v) for v in value) if isinstance(value, list) else None
    if kind == "bool":
        return value if isinstance(value, bool) else None
    if kind in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        return int(value) if kind == "int" else float(value)
    if kind == "str":
        return value if isinstance(value, str) else str(value)
    return value


def build_model(entity_type: str, attributes: Mapping[str, JsonValue]) -> Any:
    """The typed object (an instance of the type's dataclass) for current attributes."""
    etype = get_type(entity_type) or get_type(GENERIC_TYPE)
    assert etype is not None
    kwargs = {s.name: _typed(s, attributes.get(s.name)) for s in etype.fields if s.kind != "json"}
    known = {s.name for s in etype.fields}
    for spec in etype.fields:
        if spec.kind == "json":  # the generic catch-all: every attribute no field names
            kwargs[spec.name] = {k: v for k, v in attributes.items() if k not in known} or None
    return etype.model(**kwargs)
