"""Relay benchmarks: ceilings and the relay measured in the same run, on the same servers.

``python -m bench`` (``make bench``) runs every scenario and writes JSON to bench/results/ and a
markdown table to stdout; ``--smoke`` runs each scenario at a tiny scale (CI); ``--profile``
attaches py-spy to the consumer and the API. See docs/performance.md.
"""
