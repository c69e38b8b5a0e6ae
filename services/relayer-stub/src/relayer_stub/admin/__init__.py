"""Test-control endpoints under ``/__admin``."""
