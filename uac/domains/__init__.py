"""The pure domain: facts, entity models and the catalog. Imports no I/O."""

from uac.domains.catalog import (
    GENERIC_TYPE,
    EntityType,
    FieldSpec,
    build_model,
    derive_entity_id,
    entity_types,
    get_type,
    validate_attributes,
)
from uac.domains.facts import Fact, LogRecord, Op, Tick, WindowMark, iso, make_fact, to_utc

__all__ = [
    "GENERIC_TYPE", "EntityType", "Fact", "FieldSpec", "LogRecord", "Op", "Tick", "WindowMark",
    "build_model", "derive_entity_id", "entity_types", "get_type", "iso", "make_fact",
    "to_utc", "validate_attributes",
]
