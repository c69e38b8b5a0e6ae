"""Exit codes of the ``relay`` command, one meaning each (documented in docs/runbook.md).

Scripts may rely on them: 0 is success; argparse itself exits 2 on a bad command line."""

EXIT_OK = 0
EXIT_NOT_FOUND = 1  # no such client, dead letter or transaction
EXIT_USAGE = 2  # a bad command line, or input the API or the database refused as invalid
EXIT_TIMEOUT = 3  # waited and it did not happen in time (queues --wait, tx wait)
EXIT_LEFT = 4  # dlq redrive: some messages stay in the DLQ (listed with why)
EXIT_UNREACHABLE = 5  # the database, SQS or the API cannot be reached (or answered 503)
EXIT_REFUSED = 6  # the API refused the key: 401, 403 (policy included) or 429
EXIT_NOT_CONFIRMED = 7  # tx wait: final, but failed, expired or canceled
