"""Facts from conversations: prompts, model calls, validation, the offline model."""
