"""Fault injection on demand: latency, 5xx, 429, 400 and accept-then-hang."""
