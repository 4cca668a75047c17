"""Exporting a user's memory as a self-contained Python project (or every user's).

See :mod:`uac.export` for the layout of a project. ``EXPORTED_AT`` is the
store's event-time watermark, and the rules run at that time with the store's
rule settings, so ``python runner.py`` in the project prints the alerts the
memory has open. An export of the same store is the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from uac.domains.facts import derive_id, iso
from uac.errors import ExportError
from uac.executor.alerts import AlertEventKind, evaluate
from uac.executor.rules import Rule, RuleContext
from uac.export.project import Evaluation, check_target, project_files, write_files
from uac.export.snapshot import Snapshot, list_users, read_snapshot
from uac.settings import Settings

INDEX_FILE = "users.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_RESERVED = frozenset({INDEX_FILE, "con", "prn", "aux", "nul"})


@dataclass(frozen=True, slots=True)
class ExportSummary:
    """What an export wrote, and whether its rules reproduce the store's open alerts."""

    user_id: str
    directory: Path
    exported_at: datetime
    state_version: int
    counts: dict[str, int]
    """Entities per type (types with none left out)."""
    rules: int
    open_alerts: int
    matches_store: bool
    """The exported rules raise exactly the (rule, subject) pairs of the store's open alerts."""
    rule_failures: tuple[str, ...]
    files: tuple[str, ...]

    @property
    def entities(self) -> int:
        """How many entities were exported."""
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description."""
        return {"user_id": self.user_id, "directory": str(self.directory),
                "exported_at": iso(self.exported_at), "state_version": self.state_version,
                "entities": self.entities, "counts": self.counts, "rules": self.rules,
                "open_alerts": self.open_alerts, "matches_store": self.matches_store,
                "rule_failures": list(self.rule_failures), "files": list(self.files)}


def _default_rules() -> tuple[Rule, ...]:
    from uac.streams.embedded import default_rules

    return default_rules()


def evaluate_snapshot(snap: Snapshot, rules: Sequence[Rule]) -> Evaluation:
    """Run ``rules`` in-process over the snapshot at its event time, as the store would."""
    ctx = RuleContext(snap.exported_at, snap.days_ahead, snap.lapse_days_ahead)
    events, failures = evaluate(snap.state, rules, ctx, {})
    pairs = sorted({(e.alert.rule_id, e.alert.subject) for e in events
                    if e.kind is AlertEventKind.RAISED})
    return Evaluation(tuple(pairs), tuple((f.rule_id, f.reason) for f in failures))


def export_user(user_id: str, directory: Path | str, *, settings: Settings, force: bool = False,
                rules: Sequence[Rule] | None = None) -> ExportSummary:
    """Write ``user_id``'s memory as a Python project into ``directory``.

    ``directory`` must be new or empty unless ``force`` (then the exported files are
    overwritten and other files left alone). ``rules`` defaults to the built-in rules,
    the ones the store runs. Raises :class:`~uac.errors.ExportError`.
    """
    target = Path(directory)
    check_target(target, force)
    snap = read_snapshot(user_id, settings=settings)
    chosen = tuple(_default_rules() if rules is None else rules)
    evaluation = evaluate_snapshot(snap, chosen)
    files = project_files(snap, chosen, evaluation)
    write_files(target, files)
    counts: dict[str, int] = {}
    for view in snap.state.current():
        counts[view.entity_type] = counts.get(view.entity_type, 0) + 1
    return ExportSummary(
        user_id, target, snap.exported_at, snap.state_version, dict(sorted(counts.items())),
        len(chosen), len(snap.open_alerts), evaluation.matches(snap.open_alerts),
        tuple(f"{rule_id}: {reason}" for rule_id, reason in evaluation.failures),
        tuple(files))


def directory_names(users: Sequence[str]) -> dict[str, str]:
    """A safe, unique directory name per user id: the id itself when it is plain
    (letters, digits, ``._-``, starting with a letter or digit), otherwise a cleaned prefix plus
    a hash of the id. Names never contain a path separator and are unique ignoring case."""
    names: dict[str, str] = {}
    for user in users:
        base = _UNSAFE.sub("_", user)[:48].lstrip("._-") or "user"
        plain = base == user and base.lower() not in _RESERVED
        names[user] = base if plain else f"{base}-{derive_id(user, size=5)}"
    folded: dict[str, list[str]] = {}
    for user, name in names.items():
        folded.setdefault(name.lower(), []).append(user)
    for group in folded.values():
        for user in group if len(group) > 1 else ():
            names[user] = f"{names[user]}-{derive_id(user, size=5)}"
    if len({n.lower() for n in names.values()}) != len(names):
        raise ExportError("could not give every user a distinct directory name")
    return names


def export_all(directory: Path | str, *, settings: Settings, force: bool = False,
               progress: Callable[[int], None] | None = None) -> list[ExportSummary]:
    """Export every user into ``directory/<name>/`` (see :func:`directory_names`) and write
    ``directory/users.json`` mapping user ids to directories. ``progress(1)`` per user.

    Each user is read in its own short read of the store, so a long export does not
    block a writer; users exported while an ingest runs may have different event times.
    """
    target = Path(directory)
    check_target(target, force)
    users = list_users(settings=settings)
    names = directory_names(users)
    summaries = []
    for user in users:
        summaries.append(export_user(user, target / names[user], settings=settings, force=force))
        if progress is not None:
            progress(1)
    index = [{"user_id": u, "directory": names[u]} for u in users]
    write_files(target, {INDEX_FILE: orjson.dumps(
        index, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"})
    return summaries
