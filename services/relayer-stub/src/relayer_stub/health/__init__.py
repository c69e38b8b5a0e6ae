"""Liveness and readiness, as upstream: no auth."""
