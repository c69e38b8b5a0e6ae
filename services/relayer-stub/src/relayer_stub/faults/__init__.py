"""Fault injection on demand: latency, 5xx, 429, 400, accept-then-hang, and per relayer a jam
and a balance."""
