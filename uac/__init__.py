"""uac — User as Code: executable memory for personalized AI agents.

The library API lives in :mod:`uac.api` (ingest, state, facts, alerts, query,
replay, export); settings in :class:`uac.settings.Settings`.
"""

__version__ = "0.1.0"
