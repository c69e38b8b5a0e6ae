"""Relay data pipeline."""
