"""The built-in rules: trusted code shipped with uac, run over typed state and event time.

Each rule is pure (no I/O, no wall clock: ``ctx.now`` is the only time) and
deterministic, and reads state only through ``UserState.of_type``/``entity``
and an entity view's ``entity_type``, ``entity_id``, ``key``, ``model`` and
``attributes``, so the rules also run in an exported, standalone project that
re-implements that small surface. The rules live by domain in the sibling
``builtin_*`` modules; this module lists them.
"""

from __future__ import annotations

from uac.executor.builtin_health import drug_allergy
from uac.executor.builtin_money import (
    payment_destination_conflict,
    spending_limit,
    warranty_or_return_lapsing,
)
from uac.executor.builtin_schedule import deadline_approaching, overlapping_commitments
from uac.executor.builtin_travel import passport_validity, single_entry_visa_used
from uac.executor.rules import Rule

BUILTIN_RULES: tuple[Rule, ...] = (
    drug_allergy,
    passport_validity,
    single_entry_visa_used,
    overlapping_commitments,
    spending_limit,
    payment_destination_conflict,
    deadline_approaching,
    warranty_or_return_lapsing,
)
"""Every built-in rule, in a stable order."""

BUILTIN_MODULES: tuple[str, ...] = (
    "uac.executor.builtin_common",
    "uac.executor.builtin_health",
    "uac.executor.builtin_travel",
    "uac.executor.builtin_schedule",
    "uac.executor.builtin_money",
    "uac.executor.builtin",
)
"""The modules the built-in rules are made of (for an export), helpers first."""

__all__ = [
    "BUILTIN_MODULES",
    "BUILTIN_RULES",
    "deadline_approaching",
    "drug_allergy",
    "overlapping_commitments",
    "passport_validity",
    "payment_destination_conflict",
    "single_entry_visa_used",
    "spending_limit",
    "warranty_or_return_lapsing",
]
