"""Model calls: the :class:`ChatModel` port and its litellm adapter.

Every call goes through litellm, so any provider works (``openai/gpt-4o-mini``,
``ollama/llama3``, ``hosted_vllm/<name>`` with an API base). With no model
configured the offline model runs, registered as a litellm custom provider, so
the same path (prompt, call, parse, validate) runs. litellm is imported on the
first call: it takes seconds to import and commands that never extract skip it.
"""

from __future__ import annotations

import logging
import os
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from uac.errors import ConfigError, ModelError
from uac.extraction.prompt import ANSWER_SCHEMA

log = logging.getLogger(__name__)
STEP_ID = "extract.model"
OFFLINE_MODEL = "uac-offline/rules-v1"
RESPONSE_FORMATS = ("auto", "json_schema", "json_object", "none")


@dataclass(frozen=True, slots=True)
class ModelAnswer:
    """A model's answer text and what the call cost."""

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost: float
    seconds: float


class ChatModel(ABC):
    """A chat model that answers a list of messages. Raises :class:`ModelError` (``retriable``)."""

    name: str

    @abstractmethod
    def complete(self, messages: list[dict[str, str]]) -> ModelAnswer: ...


def import_litellm() -> Any:
    """litellm, imported on first use (with the local cost map: no network at import)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError as exc:  # pragma: no cover - litellm is a dependency
        raise ConfigError("litellm is not installed: pip install 'uac'") from exc
    litellm.suppress_debug_info = True  # errors are ours to report, without litellm's banner
    return litellm


class LiteLLMModel(ChatModel):
    """Any litellm model. ``timeout`` bounds one call; retries are the extractor's, not litellm's."""

    def __init__(self, model: str, *, api_base: str | None = None, api_key: str | None = None,
                 timeout: float = 60.0, response_format: str = "auto") -> None:
        if response_format not in RESPONSE_FORMATS:
            raise ConfigError(f"response format {response_format!r}: use one of {RESPONSE_FORMATS}")
        self.name = model
        self.api_base, self.api_key, self.timeout = api_base, api_key, timeout
        self.response_format = response_format
        if model == OFFLINE_MODEL or model.startswith("uac-offline/"):
            from uac.extraction.offline import register_offline_model

            register_offline_model()

    def _format(self, litellm: Any) -> dict[str, Any] | None:
        mode = self.response_format
        if mode == "auto":
            try:
                mode = "json_schema" if litellm.supports_response_schema(model=self.name) else "none"
            except Exception:  # unknown model: ask in the prompt only
                mode = "none"
        if mode == "json_schema":
            return {"type": "json_schema",
                    "json_schema": {"name": "uac_facts", "schema": ANSWER_SCHEMA, "strict": False}}
        return {"type": "json_object"} if mode == "json_object" else None

    def complete(self, messages: list[dict[str, str]]) -> ModelAnswer:
        litellm = import_litellm()
        kwargs: dict[str, Any] = {"model": self.name, "messages": messages, "timeout": self.timeout,
                                  "num_retries": 0, "max_retries": 0, "temperature": 0,
                                  "drop_params": True}
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self.api_key:
            kwargs["api_key"] = self.api_key
        response_format = self._format(litellm)
        if response_format is not None:
            kwargs["response_format"] = response_format
        started = time.perf_counter()
        try:
            response = litellm.completion(**kwargs)
        except Exception as exc:
            raise model_error(exc, self.name) from exc
        seconds = time.perf_counter() - started
        return ModelAnswer(_text(response), self.name, *_usage(response),
                           _cost(litellm, response), seconds)


def model_error(exc: BaseException, model: str) -> ModelError:
    """A litellm exception as a :class:`ModelError`: timeouts, 429 and 5xx are retriable."""
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    kind = type(exc).__name__
    retriable = kind in {"Timeout", "APIConnectionError", "RateLimitError", "InternalServerError",
                         "ServiceUnavailableError", "BadGatewayError"} or (
        status is not None and (status in (408, 409, 429) or status >= 500))
    message = str(exc).splitlines()[0][:300] if str(exc) else kind
    return ModelError(f"{model}: {kind}{f' {status}' if status else ''}: {message}",
                      retriable=retriable, status=status, step_id=STEP_ID)


def _text(response: Any) -> str:
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _usage(response: Any) -> tuple[int, int]:
    usage = getattr(response, "usage", None)
    prompt = getattr(usage, "prompt_tokens", 0) or 0
    completion = getattr(usage, "completion_tokens", 0) or 0
    return int(prompt), int(completion)


def _cost(litellm: Any, response: Any) -> float:
    hidden = getattr(response, "_hidden_params", None)
    known = hidden.get("response_cost") if isinstance(hidden, dict) else None
    if isinstance(known, (int, float)):  # litellm priced the call already: do not price it twice
        return float(known)
    try:
        return float(litellm.completion_cost(completion_response=response) or 0.0)
    except Exception:  # a model without a price (local servers, the offline model): no cost
        return 0.0
