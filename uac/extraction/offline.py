"""The offline model: the rule-based extractor as a litellm custom provider.

``uac-offline/rules-v1`` answers the extraction prompt the way a model would,
from a documented list of plain first-person statements
(:data:`uac.extraction.offline_rules.OFFLINE_FORMS`). It is for demos and tests:
deterministic, free and without network, it understands those forms and
nothing else. Registered with litellm, it runs through the same code path as
any hosted model.
"""

from __future__ import annotations

from typing import Any

import orjson

from uac.extraction.model import OFFLINE_MODEL, import_litellm

PROVIDER = OFFLINE_MODEL.split("/")[0]
_registered: list[Any] = []


def answer_for(messages: list[dict[str, Any]]) -> str:
    """The offline model's answer (JSON text) to the extraction prompt's messages."""
    body: dict[str, Any] | None = None
    for message in reversed(messages):  # the prompt document (a retry appends a message after it)
        try:
            data = orjson.loads(message.get("content") or "")
        except orjson.JSONDecodeError:
            continue
        if isinstance(data, dict) and "turns" in data:
            body = data
            break
    if body is None:
        return '{"facts": []}'
    from uac.extraction.offline_rules import extract

    return orjson.dumps(extract(list(body.get("turns", [])), list(body.get("manifest", [])))).decode()


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)  # the offline model has no tokenizer: ~4 characters a token


def register_offline_model() -> None:
    """Register the offline model with litellm (once per process)."""
    if _registered:
        return
    litellm = import_litellm()
    from litellm.llms.custom_llm import CustomLLM
    from litellm.types.utils import ModelResponse

    class OfflineModel(CustomLLM):
        def completion(self, *args: Any, **kwargs: Any) -> Any:
            messages = kwargs.get("messages") or []
            text = answer_for(messages)
            prompt = sum(_tokens(str(m.get("content", ""))) for m in messages)
            return ModelResponse(
                model=OFFLINE_MODEL,
                choices=[{"message": {"role": "assistant", "content": text},
                          "finish_reason": "stop", "index": 0}],
                usage={"prompt_tokens": prompt, "completion_tokens": _tokens(text),
                       "total_tokens": prompt + _tokens(text)})

    handler = OfflineModel()
    # A price of zero in litellm's cost map: without an entry litellm searches its whole map for
    # a similar model on every call (a third of the call's time), to find no price.
    litellm.register_model({OFFLINE_MODEL: {
        "litellm_provider": PROVIDER, "mode": "chat", "input_cost_per_token": 0.0,
        "output_cost_per_token": 0.0, "cache_creation_input_token_cost": 0.0,
        "cache_read_input_token_cost": 0.0}})
    litellm.custom_provider_map = [
        *[p for p in litellm.custom_provider_map if p.get("provider") != PROVIDER],
        {"provider": PROVIDER, "custom_handler": handler}]
    _registered.append(handler)
