"""Schema registries: where Avro schemas get the ids the Confluent wire format carries.

- :class:`LocalSchemaRegistry`: built from the ``.avsc`` files of a directory (``schemas/``),
  no server; for the embedded runner and tests.
- :class:`HttpSchemaRegistry`: a client of the Confluent Schema Registry REST API (standard
  library only, with timeouts; ids and schemas cached, since they never change).

Subjects follow Confluent's TopicNameStrategy: ``<topic>-value``. Keys are not Avro (plain
UTF-8 strings), so there are no ``-key`` subjects.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro

from uac.errors import UacError
from uac.streams.compat import LEVELS, compatibility_problems

SCHEMA_FILE = re.compile(r"^(?P<subject>.+)\.v(?P<version>[1-9][0-9]*)\.avsc$")
"""``<subject>.v<version>.avsc``, e.g. ``uac.facts-value.v1.avsc``."""
ID_BLOCK = 1000
"""Local ids: subject number * ID_BLOCK + version (so at most 999 versions per subject)."""
DEFAULT_LEVEL = "BACKWARD_TRANSITIVE"
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemaRegistryError(UacError):
    """The registry refused a request or could not be reached (``retriable``: try again later)."""

    def __init__(self, message: str, *, retriable: bool = False, status: int | None = None,
                 error_code: int | None = None) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.status = status
        self.error_code = error_code


class SchemaNotFoundError(SchemaRegistryError):
    """No such schema id, subject, version or schema under a subject."""


def normalize_schema(schema: str | Mapping[str, Any] | list[Any]) -> str:
    """Compact JSON text with sorted keys: the form schemas are compared, cached and sent in."""
    parsed = json.loads(schema) if isinstance(schema, str) else schema
    return json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    """One version of a subject: its number, its registry-wide id and its schema (JSON text)."""

    subject: str
    version: int
    schema_id: int
    schema: str

    @property
    def parsed(self) -> Any:
        """The schema's JSON (dicts, lists, strings), as in the ``.avsc`` file."""
        return json.loads(self.schema)


class SchemaRegistry(ABC):
    """Schemas by id and by subject/version, as the Confluent Schema Registry serves them."""

    @abstractmethod
    def get_schema(self, schema_id: int) -> str:
        """The schema (JSON text) with this id; :class:`SchemaNotFoundError` if none."""

    @abstractmethod
    def register(self, subject: str, schema: str) -> int:
        """The id of ``schema`` under ``subject``, registering it as a new version if needed
        (refused when it breaks the subject's compatibility level)."""

    @abstractmethod
    def lookup(self, subject: str, schema: str) -> RegisteredSchema:
        """The version of ``subject`` whose schema is ``schema``; :class:`SchemaNotFoundError` if none."""

    @abstractmethod
    def latest(self, subject: str) -> RegisteredSchema:
        """The newest version of ``subject``."""

    @abstractmethod
    def versions(self, subject: str) -> list[int]:
        """The version numbers of ``subject``, oldest first."""

    @abstractmethod
    def get_version(self, subject: str, version: int) -> RegisteredSchema:
        """One version of ``subject``."""

    @abstractmethod
    def subjects(self) -> list[str]:
        """Every subject, sorted."""

    @abstractmethod
    def check_compatibility(self, subject: str, schema: str) -> list[str]:
        """Why ``schema`` may not be registered next under ``subject`` (empty: it may), by the
        subject's compatibility level."""

    @abstractmethod
    def set_compatibility(self, subject: str, level: str = DEFAULT_LEVEL) -> None:
        """Set the subject's compatibility level (e.g. ``BACKWARD_TRANSITIVE``)."""


class LocalSchemaRegistry(SchemaRegistry):
    """An in-memory registry loaded from ``<subject>.v<N>.avsc`` files.

    The id rule (stable, documented, no hashes): sort the distinct subjects; the i-th
    (from 1) is subject number i; version v of it gets id ``i * 1000 + v``. So the same
    directory gives the same ids on every machine and in every run, a new version of a
    subject never changes another id, and only a new subject that sorts before existing
    ones renumbers those after it (bytes written through this registry are not meant to
    outlive a change of ``schemas/``; in Kafka the Confluent registry assigns ids for good).
    Versions of a subject must be numbered 1..N without gaps. Schemas registered at run time
    are kept in memory only (a new subject gets the next free subject number).
    """

    def __init__(self, entries: Iterable[tuple[str, int, str]] = ()) -> None:
        by_subject: dict[str, dict[int, str]] = {}
        for subject, version, schema in entries:
            _check_schema(schema, f"{subject} version {version}")
            by_subject.setdefault(subject, {})[version] = normalize_schema(schema)
        self._lock = threading.Lock()
        self._numbers: dict[str, int] = {}
        self._versions: dict[str, list[RegisteredSchema]] = {}
        self._by_id: dict[int, RegisteredSchema] = {}
        self._levels: dict[str, str] = {}
        for number, subject in enumerate(sorted(by_subject), 1):
            found = sorted(by_subject[subject])
            if found != list(range(1, len(found) + 1)) or len(found) >= ID_BLOCK:
                raise SchemaRegistryError(f"subject {subject!r} has versions {found}; they must be "
                                          f"1..N with N < {ID_BLOCK}")
            self._numbers[subject] = number
            for version in found:
                self._add(subject, version, by_subject[subject][version])

    @classmethod
    def from_dir(cls, path: str | Path) -> LocalSchemaRegistry:
        """Load every ``<subject>.v<N>.avsc`` file of ``path`` (other files are ignored)."""
        if not Path(path).is_dir():
            raise SchemaRegistryError(f"schema directory {path} not found")
        entries = []
        for file in sorted(Path(path).iterdir()):
            match = SCHEMA_FILE.match(file.name)
            if match is None:
                continue
            try:
                text = file.read_text(encoding="utf-8")
                json.loads(text)
            except (OSError, ValueError) as exc:
                raise SchemaRegistryError(f"{file}: cannot read the schema: {exc}") from None
            entries.append((match["subject"], int(match["version"]), text))
        return cls(entries)

    def _add(self, subject: str, version: int, schema: str) -> RegisteredSchema:
        entry = RegisteredSchema(subject, version, self._numbers[subject] * ID_BLOCK + version, schema)
        self._versions.setdefault(subject, []).append(entry)
        self._by_id[entry.schema_id] = entry
        return entry

    def _subject(self, subject: str) -> list[RegisteredSchema]:
        found = self._versions.get(subject)
        if not found:
            raise SchemaNotFoundError(f"subject {subject!r} not found", status=404, error_code=40401)
        return found

    def get_schema(self, schema_id: int) -> str:
        entry = self._by_id.get(schema_id)
        if entry is None:
            raise SchemaNotFoundError(f"schema id {schema_id} not found", status=404, error_code=40403)
        return entry.schema

    def register(self, subject: str, schema: str) -> int:
        text = normalize_schema(schema)
        with self._lock:
            for entry in self._versions.get(subject, ()):
                if entry.schema == text:
                    return entry.schema_id
            problems = self.check_compatibility(subject, text)
            if problems:
                raise SchemaRegistryError(
                    f"schema is incompatible with subject {subject!r}: {'; '.join(problems)}",
                    status=409, error_code=409)
            _check_schema(text, f"{subject} (new version)")
            if subject not in self._numbers:
                self._numbers[subject] = max(self._numbers.values(), default=0) + 1
            versions = self._versions.get(subject, [])
            if len(versions) + 1 >= ID_BLOCK:
                raise SchemaRegistryError(f"subject {subject!r} is full ({ID_BLOCK - 1} versions)")
            return self._add(subject, len(versions) + 1, text).schema_id

    def lookup(self, subject: str, schema: str) -> RegisteredSchema:
        text = normalize_schema(schema)
        for entry in self._subject(subject):
            if entry.schema == text:
                return entry
        raise SchemaNotFoundError(f"schema not found under subject {subject!r}", status=404,
                                  error_code=40403)

    def latest(self, subject: str) -> RegisteredSchema:
        return self._subject(subject)[-1]

    def versions(self, subject: str) -> list[int]:
        return [e.version for e in self._subject(subject)]

    def get_version(self, subject: str, version: int) -> RegisteredSchema:
        found = self._subject(subject)
        if not 1 <= version <= len(found):
            raise SchemaNotFoundError(f"subject {subject!r} has no version {version}", status=404,
                                      error_code=40402)
        return found[version - 1]

    def subjects(self) -> list[str]:
        return sorted(self._versions)

    def check_compatibility(self, subject: str, schema: str) -> list[str]:
        earlier = [e.parsed for e in self._versions.get(subject, ())]
        level = self._levels.get(subject, DEFAULT_LEVEL)
        return compatibility_problems(json.loads(schema), earlier, level)

    def set_compatibility(self, subject: str, level: str = DEFAULT_LEVEL) -> None:
        if level.upper() not in LEVELS:
            raise SchemaRegistryError(f"unknown compatibility level {level!r}", status=422)
        self._levels[subject] = level.upper()


class HttpSchemaRegistry(SchemaRegistry):
    """A Confluent Schema Registry client over HTTP (``urllib``; no proxies unless given).

    Errors are :class:`SchemaRegistryError`; ``retriable`` for a 5xx or 429 answer, a timeout
    or a connection failure. Schemas by id and ids by (subject, schema) are cached.
    """

    def __init__(self, url: str, *, timeout: float = 10.0, auth: tuple[str, str] | None = None,
                 proxies: Mapping[str, str] | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Accept": CONTENT_TYPE, "Content-Type": CONTENT_TYPE}
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            self._headers["Authorization"] = f"Basic {token}"
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler(dict(proxies or {})))
        self._schemas: dict[int, str] = {}
        self._ids: dict[tuple[str, str], int] = {}

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, headers=self._headers, method=method)
        what = f"{method} {path}"
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise _http_error(what, exc) from None
        except (urllib.error.URLError, OSError) as exc:  # refused, reset, timed out, DNS
            reason = getattr(exc, "reason", exc)
            raise SchemaRegistryError(f"schema registry {self.url} unreachable ({what}): {reason}",
                                      retriable=True) from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            raise SchemaRegistryError(f"schema registry answered {what} with non-JSON: {raw[:200]!r}",
                                      retriable=True) from None

    @staticmethod
    def _quote(subject: str) -> str:
        return urllib.parse.quote(subject, safe="")

    def _entry(self, data: Any, subject: str) -> RegisteredSchema:
        try:
            entry = RegisteredSchema(str(data.get("subject", subject)), int(data["version"]),
                                     int(data["id"]), str(data["schema"]))
        except (AttributeError, KeyError, TypeError, ValueError):
            raise SchemaRegistryError(f"unexpected answer from the registry: {data!r:.200}") from None
        self._schemas.setdefault(entry.schema_id, entry.schema)
        self._ids.setdefault((subject, normalize_schema(entry.schema)), entry.schema_id)
        return entry

    def get_schema(self, schema_id: int) -> str:
        cached = self._schemas.get(schema_id)
        if cached is None:
            data = self._call("GET", f"/schemas/ids/{int(schema_id)}")
            if not isinstance(data, dict) or not isinstance(data.get("schema"), str):
                raise SchemaRegistryError(f"unexpected answer for schema id {schema_id}: {data!r:.200}")
            cached = self._schemas.setdefault(schema_id, data["schema"])
        return cached

    def register(self, subject: str, schema: str) -> int:
        text = normalize_schema(schema)
        cached = self._ids.get((subject, text))
        if cached is None:
            data = self._call("POST", f"/subjects/{self._quote(subject)}/versions", {"schema": text})
            if not isinstance(data, dict) or not isinstance(data.get("id"), int):
                raise SchemaRegistryError(f"unexpected answer when registering: {data!r:.200}")
            cached = self._ids.setdefault((subject, text), data["id"])
            self._schemas.setdefault(cached, text)
        return cached

    def lookup(self, subject: str, schema: str) -> RegisteredSchema:
        data = self._call("POST", f"/subjects/{self._quote(subject)}", {"schema": normalize_schema(schema)})
        return self._entry(data, subject)

    def latest(self, subject: str) -> RegisteredSchema:
        return self._entry(self._call("GET", f"/subjects/{self._quote(subject)}/versions/latest"), subject)

    def versions(self, subject: str) -> list[int]:
        data = self._call("GET", f"/subjects/{self._quote(subject)}/versions")
        if not isinstance(data, list) or not all(isinstance(v, int) for v in data):
            raise SchemaRegistryError(f"unexpected answer for the versions of {subject!r}: {data!r:.200}")
        return sorted(data)

    def get_version(self, subject: str, version: int) -> RegisteredSchema:
        return self._entry(self._call("GET", f"/subjects/{self._quote(subject)}/versions/{int(version)}"),
                           subject)

    def subjects(self) -> list[str]:
        data = self._call("GET", "/subjects")
        if not isinstance(data, list):
            raise SchemaRegistryError(f"unexpected answer for the subjects: {data!r:.200}")
        return sorted(str(s) for s in data)

    def check_compatibility(self, subject: str, schema: str, *, version: str = "latest") -> list[str]:
        """By the subject's level, against ``version`` (``latest``; ``all``: every version, as
        ``POST /compatibility/subjects/{subject}/versions`` does for transitive levels)."""
        path = f"/compatibility/subjects/{self._quote(subject)}/versions"
        if version != "all":
            path += f"/{urllib.parse.quote(str(version), safe='')}"
        try:
            data = self._call("POST", path + "?verbose=true", {"schema": normalize_schema(schema)})
        except SchemaNotFoundError as exc:
            if exc.error_code == 40401:  # no such subject yet: anything may be its first version
                return []
            raise
        if not isinstance(data, dict) or not isinstance(data.get("is_compatible"), bool):
            raise SchemaRegistryError(f"unexpected answer for a compatibility check: {data!r:.200}")
        if data["is_compatible"]:
            return []
        return [str(m) for m in data.get("messages") or ["incompatible (the registry gave no reason)"]]

    def set_compatibility(self, subject: str, level: str = DEFAULT_LEVEL) -> None:
        data = self._call("PUT", f"/config/{self._quote(subject)}", {"compatibility": level.upper()})
        if not isinstance(data, dict) or str(data.get("compatibility", "")).upper() != level.upper():
            raise SchemaRegistryError(f"unexpected answer when setting compatibility: {data!r:.200}")


def _check_schema(text: str, what: str) -> None:
    try:
        fastavro.parse_schema(json.loads(text), named_schemas={})
    except Exception as exc:  # fastavro raises KeyError, SchemaParseException, UnknownType...
        raise SchemaRegistryError(f"{what}: not a valid Avro schema: {type(exc).__name__}: {exc}",
                                  status=422, error_code=42201) from None


def _http_error(what: str, exc: urllib.error.HTTPError) -> SchemaRegistryError:
    """The error for a non-2xx answer, with Confluent's ``error_code`` and message when given."""
    try:
        body = json.loads(exc.read() or b"{}")
    except (OSError, ValueError):
        body = {}
    code = body.get("error_code") if isinstance(body, dict) else None
    message = body.get("message") if isinstance(body, dict) else None
    text = f"schema registry: {what} -> HTTP {exc.code}" + (f" ({code}): {message}" if message else "")
    kind = SchemaNotFoundError if exc.code == 404 else SchemaRegistryError
    return kind(text, retriable=exc.code >= 500 or exc.code == 429, status=exc.code,
                error_code=code if isinstance(code, int) else None)
