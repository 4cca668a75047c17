"""Property-based tests of the fold: deterministic, idempotent, order-independent, and exactly
the documented contradiction rule (checked against an independent oracle)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from uac.checkpointer.fold import as_of, fold, fold_window, states_equal
from uac.checkpointer.state import UserState
from uac.domains.facts import Fact, Op, make_fact

BASE = datetime(2025, 1, 1, tzinfo=UTC)
SOURCES = [f"s{i}" for i in range(6)]


@st.composite
def facts(draw: st.DrawFn) -> Fact:
    op = draw(st.sampled_from([Op.ASSERT, Op.ASSERT, Op.ASSERT, Op.RETRACT]))
    attrs: dict[str, Any] = {}
    if op is Op.ASSERT:
        attrs = draw(st.dictionaries(st.sampled_from(["x", "y", "z"]),
                                     st.one_of(st.none(), st.integers(0, 3), st.sampled_from("ab")),
                                     max_size=3))
    supersedes = tuple(draw(st.lists(st.sampled_from(SOURCES), max_size=1)))
    source = draw(st.sampled_from(SOURCES))
    supersedes = tuple(s for s in supersedes if s != source)
    return make_fact(
        user_id=draw(st.sampled_from(["u1", "u2"])),
        entity_type=draw(st.sampled_from(["trip", "medication"])),
        entity_id=draw(st.sampled_from(["a", "b"])),
        op=op, attributes=attrs,
        valid_time=BASE + timedelta(days=draw(st.integers(0, 4))),
        observed_time=BASE + timedelta(days=draw(st.integers(0, 4))),
        provenance=(source,), supersedes=supersedes,
    )


fact_lists = st.lists(facts(), max_size=25)


def snapshots(states: dict[str, UserState]) -> dict[str, bytes]:
    return {u: s.snapshot_bytes() for u, s in states.items()}


@settings(max_examples=150, deadline=None)
@given(fact_lists)
def test_applying_every_fact_twice_equals_once(items: list[Fact]) -> None:
    assert snapshots(fold(items + items)) == snapshots(fold(items))
    assert snapshots(fold(items + list(reversed(items)))) == snapshots(fold(items))


@settings(max_examples=150, deadline=None)
@given(fact_lists, st.randoms(use_true_random=False))
def test_arrival_order_does_not_matter(items: list[Fact], rnd: Any) -> None:
    shuffled = list(items)
    rnd.shuffle(shuffled)
    assert states_equal(fold(shuffled), fold(items))


@settings(max_examples=200, deadline=None)
@given(fact_lists, st.lists(st.integers(1, 6), max_size=8))
def test_windows_do_not_change_the_state(items: list[Fact], cuts: list[int]) -> None:
    states: dict[str, UserState] = {}
    position = 0
    for size in [*cuts, len(items)]:
        fold_window(states, items[position:position + size])
        position += size
    fold_window(states, items[position:])
    assert states_equal(states, fold(items))


def oracle(items: list[Fact]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The contradiction rule written out independently of the fold."""
    unique = {f.fact_id: f for f in items}.values()
    superseded: dict[str, set[str]] = {}
    for f in unique:
        superseded.setdefault(f.user_id, set()).update(f.supersedes)
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    groups: dict[tuple[str, str, str], list[Fact]] = {}
    for f in unique:
        groups.setdefault((f.user_id, f.entity_type, f.entity_id), []).append(f)
    for key, group in groups.items():
        dead = superseded.get(key[0], set())
        live = [f for f in group if f.fact_id not in dead and not dead.intersection(f.provenance)]
        retracted = max((f.order_key for f in live if f.op is Op.RETRACT), default=None)
        asserts = sorted((f for f in live if f.op is Op.ASSERT
                          and (retracted is None or f.order_key > retracted)),
                         key=lambda f: f.order_key)
        if not asserts:
            continue
        values: dict[str, Any] = {}
        for f in asserts:
            values.update(f.attributes)
        out[key] = {k: v for k, v in values.items() if v is not None}
    return out


@settings(max_examples=200, deadline=None)
@given(fact_lists)
def test_fold_follows_the_contradiction_rule(items: list[Fact]) -> None:
    states = fold(items)
    got = {(u, v.entity_type, v.entity_id): v.attributes
           for u, s in states.items() for v in s.current()}
    assert got == oracle(items)


@settings(max_examples=200, deadline=None)
@given(fact_lists, st.integers(0, 5))
def test_as_of_is_the_fold_of_what_was_known_then(items: list[Fact], day: int) -> None:
    known_at = BASE + timedelta(days=day)
    states = fold(items)
    expected = fold([f for f in items if f.observed_time <= known_at])
    for user, state in states.items():
        past = as_of(state, known_at=known_at)
        want = expected.get(user, UserState(user))
        assert [(v.key, v.attributes) for v in past.current()] == \
            [(v.key, v.attributes) for v in want.current()]


def test_later_valid_time_wins_then_observed_time_then_fact_id() -> None:
    early = make_fact(user_id="u", entity_type="passport", entity_id="us",
                      attributes={"expiry_date": "2025-12-20"}, valid_time="2025-02-01",
                      observed_time="2025-02-01", provenance=("scan-1",))
    later_valid = make_fact(user_id="u", entity_type="passport", entity_id="us",
                            attributes={"expiry_date": "2031-01-01"}, valid_time="2025-03-01",
                            observed_time="2025-01-01", provenance=("scan-2",))
    same_valid_later_observed = make_fact(
        user_id="u", entity_type="passport", entity_id="us",
        attributes={"expiry_date": "2030-12-20"}, valid_time="2025-02-01",
        observed_time="2025-06-14", provenance=("scan-3",))
    user = fold([early, same_valid_later_observed])["u"]
    assert user.entity("passport", "us").attributes["expiry_date"] == "2030-12-20"  # type: ignore[union-attr]
    user = fold([same_valid_later_observed, later_valid, early])["u"]
    assert user.entity("passport", "us").attributes["expiry_date"] == "2031-01-01"  # type: ignore[union-attr]
    # history keeps every value: as of before the later facts were known, the old value shows
    past = as_of(user, known_at=datetime(2025, 2, 2, tzinfo=UTC))
    assert past.entity("passport", "us").attributes["expiry_date"] == "2031-01-01"  # type: ignore[union-attr]
    past = as_of(user, valid_at=datetime(2025, 2, 2, tzinfo=UTC))
    assert past.entity("passport", "us").attributes["expiry_date"] == "2030-12-20"  # type: ignore[union-attr]
    assert len(user.entities[("passport", "us")].facts) == 3


def test_supersession_removes_a_wrong_fact_but_keeps_it_in_history() -> None:
    wrong = make_fact(user_id="u", entity_type="medication", entity_id="amoxicillin",
                      attributes={"name": "amoxicillin"}, valid_time="2025-07-08",
                      provenance=("rx-1",))
    fix = make_fact(user_id="u", entity_type="medication", entity_id="azithromycin",
                    attributes={"name": "azithromycin"}, valid_time="2025-07-08",
                    observed_time="2025-07-09", provenance=("rx-1-fix",), supersedes=("rx-1",))
    for order in ([wrong, fix], [fix, wrong]):
        user = fold(order)["u"]
        assert user.entity("medication", "amoxicillin") is None
        assert user.entity("medication", "azithromycin") is not None
        assert user.fact(wrong.fact_id) is wrong


def test_window_changes_name_what_happened_to_each_entity() -> None:
    from uac.checkpointer.fold import ChangeKind

    def fact(value: str, day: int, source: str, op: Op = Op.ASSERT) -> Fact:
        return make_fact(user_id="u", entity_type="trip", entity_id="a", op=op,
                         attributes={"destination": value} if op is Op.ASSERT else {},
                         valid_time=BASE + timedelta(days=day), provenance=(source,))

    states: dict[str, UserState] = {}
    kinds = [fold_window(states, batch)["u"][0].kind for batch in (
        [fact("Oslo", 1, "s1")],                 # new
        [fact("Oslo", 2, "s2")],                 # same value again, later: nothing visible
        [fact("Rome", 0, "s3")],                 # an older value: history only
        [fact("Rome", 3, "s4")],                 # a newer value
        [fact("", 4, "s5", op=Op.RETRACT)],      # gone
    )]
    assert kinds == [ChangeKind.CREATED, ChangeKind.HISTORY, ChangeKind.HISTORY,
                     ChangeKind.UPDATED, ChangeKind.DELETED]


def test_bulk_gc_nests_and_restores_the_collector_thresholds() -> None:
    import gc

    from uac.checkpointer.fold import bulk_gc

    before = gc.get_threshold()
    with bulk_gc():
        bulk = gc.get_threshold()
        assert bulk != before
        with bulk_gc():  # nested (fold_window inside a checkpointer run): left as it is
            assert gc.get_threshold() == bulk
        assert gc.get_threshold() == bulk
    assert gc.get_threshold() == before
