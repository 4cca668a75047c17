"""The extraction stage against a fake OpenAI-compatible server on a real 127.0.0.1 socket.

Every scripted case (a good answer, broken JSON, the wrong shape, a fact citing a
turn it was not given, a 429 then success, a timeout, a 500 forever) ends in its
documented outcome, and nothing is lost: refused input is returned as a reject
holding the turns, the raw answer and the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from uac.checkpointer.fold import fold
from uac.extraction.extractor import Extractor, RetryPolicy, WindowResult
from uac.extraction.fake_server import FakeChatServer, Reply
from uac.extraction.model import LiteLLMModel
from uac.extraction.prompt import PROMPT_VERSION
from uac.extraction.turns import Turn

T0 = datetime(2025, 3, 4, 21, 0, tzinfo=UTC)
TURNS = [
    Turn("maya", "chat", "t1", "user", "I'm allergic to penicillin, it gives me hives.", T0),
    Turn("maya", "chat", "t2", "assistant", "Noted. Anything else?", T0.replace(minute=1)),
    Turn("maya", "chat", "t3", "user", "I booked Tokyo, October 5 to 19.", T0.replace(minute=2)),
]
ALLERGY = {"type": "allergy", "op": "assert", "attributes": {"substance": "penicillin",
           "reaction": "hives"}, "turns": ["t1"]}
TRIP = {"type": "trip", "op": "assert", "attributes": {"destination": "Tokyo", "country": "JP",
        "start_date": "2025-10-05", "end_date": "2025-10-19", "international": True},
        "turns": ["t3"], "valid_time": "2025-03-04"}


def answer(*facts: dict[str, Any]) -> str:
    return orjson.dumps({"facts": list(facts)}).decode()


@pytest.fixture
def fake() -> Iterator[FakeChatServer]:
    server = FakeChatServer()
    with server:
        yield server


def run(fake: FakeChatServer, replies: list[Reply], *, repeat_last: bool = False,
        timeout: float = 5.0, turns: list[Turn] | None = None, state: Any = None) -> WindowResult:
    fake._replies, fake._repeat_last = list(replies), repeat_last
    model = LiteLLMModel("openai/fake-model", api_base=fake.base_url, api_key="test-key",
                         timeout=timeout)
    extractor = Extractor(model, retry=RetryPolicy(retries=2, backoff=0.01))
    return extractor.extract(turns or TURNS, state)


def payload(result: WindowResult, index: int = 0) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(result.rejects[index].payload)
    return data


def test_a_good_answer_gives_facts_of_the_user_with_provenance_and_prompt_version(
        fake: FakeChatServer) -> None:
    result = run(fake, [Reply(answer(ALLERGY, TRIP))])
    assert [f.entity_type for f in result.facts] == ["allergy", "trip"]
    allergy, trip = result.facts
    assert allergy.user_id == "maya" and allergy.provenance == ("t1",)
    assert allergy.observed_time == T0 and allergy.valid_time == T0
    assert allergy.source == f"extract:{PROMPT_VERSION}:openai/fake-model"
    assert trip.attributes["start_date"] == "2025-10-05" and trip.provenance == ("t3",)
    assert not result.rejects
    assert result.call is not None and result.call.outcome == "ok" and result.call.calls == 1
    assert (result.call.prompt_tokens, result.call.completion_tokens) == (100, 20)
    sent = fake.requests[0]["messages"]
    assert sent[0]["role"] == "system" and "allergy" in sent[0]["content"]
    body = orjson.loads(sent[1]["content"])
    assert [t["id"] for t in body["turns"]] == ["t1", "t2", "t3"]


def test_the_same_answer_twice_gives_the_same_fact_ids(fake: FakeChatServer) -> None:
    first = run(fake, [Reply(answer(ALLERGY, TRIP))])
    second = run(fake, [Reply(answer(ALLERGY, TRIP))])
    assert [f.fact_id for f in first.facts] == [f.fact_id for f in second.facts]


def test_json_in_a_code_fence_with_a_trailing_comma_is_repaired_locally(fake: FakeChatServer) -> None:
    text = "Here you go:\n```json\n" + answer(ALLERGY)[:-2] + ",]}\n```"
    result = run(fake, [Reply(text)])
    assert [f.entity_type for f in result.facts] == ["allergy"]
    assert result.call is not None and (result.call.outcome, result.call.calls) == ("repaired", 1)


def test_invalid_json_gets_one_retry_that_can_succeed(fake: FakeChatServer) -> None:
    result = run(fake, [Reply("facts: allergy to penicillin"), Reply(answer(ALLERGY))])
    assert [f.entity_type for f in result.facts] == ["allergy"]
    assert result.call is not None and (result.call.outcome, result.call.calls) == ("repaired", 2)
    retry = fake.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": "facts: allergy to penicillin"}
    assert "not valid JSON" in retry[-1]["content"]


def test_invalid_json_twice_is_dead_lettered_with_the_turns_and_both_answers(
        fake: FakeChatServer) -> None:
    result = run(fake, [Reply("not json"), Reply("{still not")])
    assert result.facts == []
    [reject] = result.rejects
    assert reject.step_id == "extract.parse" and "not valid JSON" in reject.reason
    assert reject.source == "user maya, turns t1..t3"
    data = payload(result)
    assert [t["turn_id"] for t in data["turns"]] == ["t1", "t2", "t3"]
    assert data["answers"] == ["not json", "{still not"]
    assert result.call is not None and result.call.outcome == "failed"


def test_json_of_the_wrong_shape_is_asked_again(fake: FakeChatServer) -> None:
    result = run(fake, [Reply('{"items": []}'), Reply(answer(TRIP))])
    assert [f.entity_type for f in result.facts] == ["trip"]
    assert "not an object" in fake.requests[1]["messages"][-1]["content"]


def test_a_fact_citing_a_turn_it_was_not_given_is_refused_and_the_others_kept(
        fake: FakeChatServer) -> None:
    stray = {**ALLERGY, "turns": ["t9"]}
    result = run(fake, [Reply(answer(stray, TRIP))])
    assert [f.entity_type for f in result.facts] == ["trip"]
    [reject] = result.rejects
    assert reject.step_id == "extract.validate"
    assert reject.reason == "fact 0: cites turn 't9', which it was not given"
    assert payload(result)["fact"] == stray


def test_a_429_then_success_is_retried(fake: FakeChatServer) -> None:
    result = run(fake, [Reply(status=429), Reply(answer(ALLERGY))])
    assert [f.entity_type for f in result.facts] == ["allergy"]
    assert result.call is not None and (result.call.outcome, result.call.calls) == ("ok", 2)
    assert len(fake.requests) == 2


def test_a_timeout_is_retried(fake: FakeChatServer) -> None:
    result = run(fake, [Reply(answer(TRIP), delay=3.0), Reply(answer(ALLERGY))], timeout=0.5)
    assert [f.entity_type for f in result.facts] == ["allergy"]
    assert result.call is not None and result.call.calls == 2


def test_a_500_forever_ends_in_the_dead_letter_store_after_bounded_retries(
        fake: FakeChatServer) -> None:
    result = run(fake, [Reply(status=500)], repeat_last=True)
    assert result.facts == []
    [reject] = result.rejects
    assert reject.step_id == "extract.model"
    assert "InternalServerError 500" in reject.reason and "after 3 attempt(s)" in reject.reason
    assert len(fake.requests) == 3  # one call and two retries, then it stops
    assert [t["turn_id"] for t in payload(result)["turns"]] == ["t1", "t2", "t3"]
    assert result.call is not None and result.call.outcome == "failed"


def test_a_400_is_not_retried(fake: FakeChatServer) -> None:
    result = run(fake, [Reply(status=400, content="bad request")])
    assert len(fake.requests) == 1
    assert result.rejects[0].step_id == "extract.model" and "after 1 attempt(s)" in (
        result.rejects[0].reason)


@pytest.mark.parametrize(("fact", "reason"), [
    ({**ALLERGY, "user": "someone-else"}, "unknown key(s) ['user']"),
    ({**ALLERGY, "turns": ["t2"]}, "cites only assistant turns"),
    ({**ALLERGY, "supersedes": ["f-not-shown"]}, "not facts of the manifest"),
    ({**ALLERGY, "attributes": {"noted_on": "last spring"}}, "field 'noted_on' must be date"),
    ({**ALLERGY, "op": "forget"}, "'op' must be assert or retract"),
    ({**ALLERGY, "confidence": 7}, "'confidence' must be a number in [0, 1]"),
    ({**ALLERGY, "valid_time": "3025-01-01"}, "outside 1900..2200"),
    ({"type": "allergy", "op": "retract", "attributes": {}, "turns": ["t1"]}, "needs 'id'"),
    ("allergy", "a fact must be a JSON object"),
])
def test_untrusted_answers_are_validated_fact_by_fact(fake: FakeChatServer, fact: Any,
                                                      reason: str) -> None:
    result = run(fake, [Reply(answer(fact, TRIP))])  # type: ignore[arg-type]
    assert [f.entity_type for f in result.facts] == ["trip"]
    assert [f.user_id for f in result.facts] == ["maya"]
    assert reason in result.rejects[0].reason


def test_an_unknown_entity_type_becomes_a_generic_entity(fake: FakeChatServer) -> None:
    pet = {"type": "pet", "op": "assert", "attributes": {"name": "Biscuit"}, "turns": ["t1"]}
    result = run(fake, [Reply(answer(pet))])
    [fact] = result.facts
    assert fact.entity_type == "entity" and fact.attributes == {"kind": "pet", "name": "Biscuit"}


def test_a_correction_may_supersede_facts_the_manifest_showed(fake: FakeChatServer) -> None:
    first = run(fake, [Reply(answer(TRIP))])
    state = fold(first.facts)["maya"]
    trip = first.facts[0]
    fix = {"type": "trip", "op": "assert", "id": trip.entity_id, "turns": ["t3"],
           "attributes": {"start_date": "2025-10-06"}, "supersedes": [trip.fact_id]}
    result = run(fake, [Reply(answer(fix))], state=state)
    [fact] = result.facts
    assert fact.supersedes == (trip.fact_id,) and fact.entity_id == trip.entity_id
    manifest = orjson.loads(fake.requests[-1]["messages"][1]["content"])["manifest"]
    assert manifest == [{"type": "trip", "id": trip.entity_id, "attributes": dict(trip.attributes),
                         "facts": [trip.fact_id]}]


def test_a_window_of_assistant_turns_only_makes_no_call(fake: FakeChatServer) -> None:
    result = run(fake, [Reply(answer(ALLERGY))], turns=[TURNS[1]])
    assert result.call is None and result.facts == [] and fake.requests == []


def test_a_priced_model_s_call_costs_what_litellm_prices_its_tokens(fake: FakeChatServer) -> None:
    import litellm

    fake._replies = [Reply(answer(ALLERGY))]
    model = LiteLLMModel("openai/gpt-4o-mini", api_base=fake.base_url, api_key="test-key")
    result = model.complete([{"role": "user", "content": "hello"}])
    prompt, completion = litellm.cost_per_token(model="gpt-4o-mini", prompt_tokens=100,
                                                completion_tokens=20)
    assert (result.prompt_tokens, result.completion_tokens) == (100, 20)
    assert result.cost == pytest.approx(prompt + completion) and result.cost > 0


def test_the_offline_model_costs_nothing_and_is_priced_in_litellm_s_cost_map() -> None:
    import litellm

    from uac.extraction.model import OFFLINE_MODEL

    result = LiteLLMModel(OFFLINE_MODEL).complete([{"role": "user", "content": "{}"}])
    assert result.cost == 0.0 and result.text == '{"facts": []}'
    assert litellm.model_cost[OFFLINE_MODEL]["input_cost_per_token"] == 0.0
