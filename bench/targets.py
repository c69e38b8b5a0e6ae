"""The issue's targets: the thresholds a run's rows are judged against, pass or fail (targets
never change a run's exit status)."""

# The targets; docs/performance.md explains each.
CONSUMER_SHARE_OF_SQS = 0.90
CONSUMER_SHARE_OF_EXPECTED = 0.90
EXECUTOR_LATENCY_S = 0.2
ONE_PROCESS_MSGS = 1000
API_RATE = 500
API_ANSWERED_SHARE = 0.98
API_P99_MS = 20.0
API_DB_ROUND_TRIPS = 2.0
# A leased daily budget (--spend-policy budget) takes its lease in one more round trip per
# 1/32 of the budget, shared by many requests: a few thousandths of a round trip each.
LEASE_SLACK = 0.01
STATUS_HIT_P99_MS = 2.0
STATUS_MYSQL_P99_MS = 10.0
PICKUP_P95_MS = 250.0
# Issue 18 (half the CPU per transaction), with every wave-2 feature on (--spend-policy budget)
API_CPU_MS = 0.6  # per accepted request, at 500 req/s offered and above
BATCH_CPU_SHARE = 0.1  # a batch of 100's API CPU per transaction, of a single request's
API_FULL_RATE = 1000  # offered in several consecutive runs: answered in full, p99 <= 20 ms ...
API_FULL_RUNS_NEEDED = 4  # ... in at least this many of them (of 5 in a full run)
GUARD_US = 100.0  # issue 27: the guard's own code, fee budget on, per request
CONSUMER_CPU_S_PER_1000 = 0.5  # one process, at 0 and 200 ms executor latency
CONSUMER_200MS_MSGS = 1100  # one process, 200 ms executor
