"""The bounds of a client's own rate limit (the admin API and the ``relay`` command)."""

# The slowest rate a client may be given: one request per 1,000 s. Anything slower is a
# revocation, which has its own command; and the column is a single-precision FLOAT, in which a
# tiny positive rate would be stored as 0.
MIN_RATE_PER_S = 0.001
MAX_RATE_PER_S = 1_000_000
