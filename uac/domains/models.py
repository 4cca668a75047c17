"""Imports every built-in domain module so their entity types register with the catalog."""

from uac.domains import finance, health, people, purchases, schedule, travel

__all__ = ["finance", "health", "people", "purchases", "schedule", "travel"]
