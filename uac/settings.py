"""One frozen settings object, read at the edge (the CLI), never inside library code."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """uac's configuration. Every field can be set from the environment as ``UAC_<NAME>``.

    >>> Settings(data_dir=Path("/tmp/x")).window_facts
    1000
    """

    model_config = SettingsConfigDict(env_prefix="UAC_", frozen=True, extra="forbid")

    data_dir: Path = Field(
        default=Path(".uac"), description="Directory holding the fact log, rejects and state."
    )
    window_facts: int = Field(
        default=1000, ge=1, description="A checkpoint window closes after this many facts."
    )
    window_span: timedelta = Field(
        default=timedelta(days=1),
        description="A window also closes once its facts span this much event time.",
    )
    lock_timeout: float = Field(
        default=30.0, ge=0, description="Seconds to wait for a store held by another process."
    )
    rule_days_ahead: int = Field(
        default=7, ge=0, description="Deadlines alert this many days ahead (notice periods too)."
    )
    lapse_days_ahead: int = Field(
        default=14, ge=0, description="Warranties and return windows alert this many days ahead."
    )

    @property
    def log_path(self) -> Path:
        return self.data_dir / "facts.log"

    @property
    def store_path(self) -> Path:
        return self.data_dir / "state.duckdb"

    @property
    def rejects_path(self) -> Path:
        return self.data_dir / "rejects.jsonl"
