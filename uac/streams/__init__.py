"""Streams: the fact log, codecs, observation parsing, rejects, the embedded runner."""
