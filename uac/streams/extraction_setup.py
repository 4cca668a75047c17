"""The extraction stage built from :class:`~uac.settings.Settings` (model, retries, windows)."""

from __future__ import annotations

from uac.extraction.extractor import Extractor, RetryPolicy
from uac.extraction.ledger import JsonlExtractionLedger
from uac.extraction.model import LiteLLMModel
from uac.extraction.windows import WindowPolicy
from uac.metrics import Metrics
from uac.settings import Settings
from uac.streams.conversations import TurnStage


def turn_stage_from(settings: Settings, metrics: Metrics | None = None) -> TurnStage:
    """A :class:`TurnStage` over ``settings.model_name`` with the ledger in the data dir."""
    key = settings.api_key.get_secret_value() if settings.api_key is not None else None
    model = LiteLLMModel(settings.model_name, api_base=settings.api_base, api_key=key,
                         timeout=settings.model_timeout, response_format=settings.response_format)
    extractor = Extractor(model, retry=RetryPolicy(settings.model_retries, settings.model_backoff))
    policy = WindowPolicy(settings.extract_window_turns, settings.extract_window_chars,
                          settings.extract_window_span)
    return TurnStage(extractor, JsonlExtractionLedger(settings.data_dir), policy, metrics)
