"""One frozen settings object, read at the edge (the CLI), never inside library code."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from uac.executor.query import QUERY_TIMEOUT


class Settings(BaseSettings):
    """uac's configuration. Every field can be set from the environment as ``UAC_<NAME>``.

    >>> Settings(data_dir=Path("/tmp/x")).window_facts
    1000
    """

    model_config = SettingsConfigDict(env_prefix="UAC_", frozen=True, extra="forbid",
                                      env_ignore_empty=True)

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
    query_timeout: float = Field(
        default=QUERY_TIMEOUT, gt=0, description="Seconds one SQL query may run before it is stopped.")
    rule_days_ahead: int = Field(
        default=7, ge=0, description="Deadlines alert this many days ahead (notice periods too)."
    )
    lapse_days_ahead: int = Field(
        default=14, ge=0, description="Warranties and return windows alert this many days ahead."
    )

    model: str | None = Field(
        default=None,
        description="The litellm model extraction calls (e.g. openai/gpt-4o-mini, "
                    "ollama/llama3, hosted_vllm/NAME); unset: the built-in offline model.")
    api_base: str | None = Field(
        default=None, description="The model server's base URL (a local OpenAI-compatible one).")
    api_key: SecretStr | None = Field(
        default=None, description="The model provider's API key (or the provider's own env var).")
    model_timeout: float = Field(default=60.0, gt=0, description="Seconds one model call may take.")
    model_retries: int = Field(
        default=3, ge=0, description="Retries of a call that timed out, was rate limited or hit a "
                                     "server error.")
    model_backoff: float = Field(
        default=1.0, ge=0, description="Seconds before the first retry; doubles each retry.")
    response_format: str = Field(
        default="auto", pattern="^(auto|json_schema|json_object|none)$",
        description="How the answer's JSON shape is requested: auto (a JSON schema where the "
                    "model supports it), json_schema, json_object or none (the prompt only).")
    extract_window_turns: int = Field(
        default=20, ge=1, description="An extraction window (one model call) holds at most this "
                                      "many turns of a user.")
    extract_window_chars: int = Field(
        default=12_000, ge=1, description="... and at most this many characters of turn text.")
    extract_window_span: timedelta = Field(
        default=timedelta(hours=6),
        description="... spanning at most this much event time; a new session also closes it.")

    kafka_bootstrap: str = Field(
        default="127.0.0.1:9092", description="Kafka bootstrap servers (host:port, comma-separated).")
    kafka_partitions: int = Field(
        default=8, ge=1, description="Partitions of every uac topic (they are co-partitioned).")
    kafka_replication: int = Field(default=1, ge=1, description="Replication factor of uac topics.")
    topic_prefix: str = Field(
        default="", pattern=r"^[A-Za-z0-9._-]*$",
        description="Prefix of every topic name (e.g. 'staging-' for 'staging-uac.facts').")

    @property
    def model_name(self) -> str:
        """The model extraction uses: ``model``, or the offline one."""
        from uac.extraction.model import OFFLINE_MODEL

        return self.model or OFFLINE_MODEL

    @property
    def log_path(self) -> Path:
        return self.data_dir / "facts.log"

    @property
    def store_path(self) -> Path:
        return self.data_dir / "state.duckdb"

    @property
    def rejects_path(self) -> Path:
        return self.data_dir / "rejects.jsonl"
