"""Helpers for scripts/make_reference_fixtures.py (reference data for voltad's CPU engine)."""
