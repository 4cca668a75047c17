"""Shared fixtures: fresh memories in temporary directories, the bundled demo history."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from uac.settings import Settings

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

pytest_plugins = ["tests.conftest_kafka"]  # the real broker, once per session (kafka marker)

DEMO = Path(__file__).resolve().parent.parent / "uac" / "examples" / "demo.jsonl"


@pytest.fixture(scope="session", autouse=True)
def no_implicit_event_loop() -> Iterator[None]:
    """No event loop made behind a test's back: litellm's OpenAI path calls
    ``asyncio.get_event_loop()`` when called synchronously, and on the main thread, before any
    ``asyncio.run``, Python 3.11 then creates a loop and leaves it open; the next ``asyncio.run``
    drops it, and its ResourceWarning fails whichever test the collector happens to run in.
    Declaring "no current loop" makes that call raise instead, which litellm handles (as it does
    in the worker's threads)."""
    asyncio.set_event_loop(None)
    yield


@pytest.fixture
def settings_factory(tmp_path: Path) -> Callable[..., Settings]:
    """Make Settings for a fresh data dir under tmp_path (``name`` picks the subdirectory)."""

    def make(name: str = "memory", **overrides: object) -> Settings:
        return Settings(data_dir=tmp_path / name, **overrides)  # type: ignore[arg-type]

    return make


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    return settings_factory()


@pytest.fixture
def demo_path() -> Path:
    return DEMO


ROOT = Path(__file__).resolve().parent.parent


def shared_data(name: str) -> Path | None:
    """A third-party data set: $UAC_SHARED_DATA/NAME, else ../shared/data/NAME next to the
    repository (or next to the machine's working copy, for a clone elsewhere)."""
    bases = [os.environ.get("UAC_SHARED_DATA"), ROOT.parent / "shared" / "data",
             Path("/work/shared/data")]
    for base in bases:
        if base and (Path(base) / name).is_dir():
            return Path(base) / name
    return None


@pytest.fixture(scope="session")
def locomo_dir() -> Path:
    found = shared_data("locomo")
    if found is None:
        pytest.skip("LoCoMo data not found: set UAC_SHARED_DATA to the directory holding locomo/")
    return found
