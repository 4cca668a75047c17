"""One contract, two adapters: the in-memory fact log and the file log behave the same."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from uac.domains.facts import Tick, WindowMark, make_fact, to_utc
from uac.errors import LogError, LogLockedError
from uac.streams.log import FactLog, FileFactLog, InMemoryFactLog


def fact(n: int, user: str = "u"):  # type: ignore[no-untyped-def]
    return make_fact(user_id=user, entity_type="transaction", entity_id=f"t{n}",
                     attributes={"amount": n}, valid_time="2025-01-01", provenance=(f"s{n}",))


@pytest.fixture(params=["memory", "file"])
def log_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], FactLog]]:
    opened: list[FactLog] = []

    def make() -> FactLog:
        made: FactLog = InMemoryFactLog() if request.param == "memory" else FileFactLog(
            tmp_path / "facts.log")
        opened.append(made)
        return made

    yield make
    for item in opened:
        item.close()


def test_append_assigns_consecutive_offsets_and_reads_back(log_factory: Callable[[], FactLog]) -> None:
    log = log_factory()
    records = [fact(0), fact(1), Tick(to_utc("2025-01-02")), WindowMark(0)]
    result = log.append(records)
    assert (result.appended, result.duplicates, result.end_offset) == (4, 0, 4)
    assert list(log.read()) == list(enumerate(records))
    assert [o for o, _ in log.read(2)] == [2, 3]
    assert log.end_offset() == 4


def test_a_fact_already_in_the_log_is_not_appended_again(log_factory: Callable[[], FactLog]) -> None:
    log = log_factory()
    log.append([fact(0), fact(1)])
    result = log.append([fact(1), fact(2), fact(0)])
    assert (result.appended, result.duplicates) == (1, 2)
    assert log.contains(fact(2).fact_id)
    assert [r for _, r in log.read()] == [fact(0), fact(1), fact(2)]


def test_read_past_the_end_is_empty(log_factory: Callable[[], FactLog]) -> None:
    log = log_factory()
    log.append([fact(0)])
    assert list(log.read(5)) == []


def test_file_log_survives_reopen_and_reads_from_an_indexed_offset(tmp_path: Path) -> None:
    path = tmp_path / "facts.log"
    with FileFactLog(path) as log:
        log.append([fact(n) for n in range(10_000)])
    with FileFactLog(path) as log:
        assert log.end_offset() == 10_000
        assert log.contains(fact(9_999).fact_id)
        assert [o for o, _ in log.read(9_998)] == [9_998, 9_999]
        assert next(log.read(4_096))[1] == fact(4_096)


def test_file_log_drops_a_torn_last_line_left_by_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "facts.log"
    with FileFactLog(path) as log:
        log.append([fact(0), fact(1)])
    with open(path, "ab") as fh:
        fh.write(b'{"kind":"fact","fact_id":"abc')  # the process died mid-write
    with FileFactLog(path) as log:
        assert log.end_offset() == 2
        log.append([fact(2)])
        assert [r for _, r in log.read()] == [fact(0), fact(1), fact(2)]


def test_only_one_writer_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "facts.log"
    with FileFactLog(path), pytest.raises(LogLockedError, match="another uac process") as info:
        FileFactLog(path)
    assert info.value.retriable
    reader = FileFactLog(path, writer=False)
    with pytest.raises(LogError, match="read-only"):
        reader.append([fact(0)])


def test_a_corrupt_record_names_its_offset(tmp_path: Path) -> None:
    path = tmp_path / "facts.log"
    with FileFactLog(path) as log:
        log.append([fact(0)])
    with open(path, "ab") as fh:
        fh.write(b'{"kind":"fact","fact_id":"x","user_id":7}\n')
    with pytest.raises(LogError, match="offset 1"):
        list(FileFactLog(path, writer=False).read())
