"""``relay-pipeline archive`` that stops dead at a checkpoint, for kill tests.

HALT_AT=<checkpoint>[:<nth>] — on the nth time the archive passes that checkpoint, print
``HALTED <checkpoint>`` and sleep until the test SIGKILLs the process.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from relay_pipeline.archive import job
from relay_pipeline.cli import main

name, _, nth = os.environ["HALT_AT"].partition(":")
wanted = int(nth or 1)
seen = 0
run_archive = job.run_archive


def _halting_run_archive(*args: Any, **kwargs: Any) -> Any:
    def checkpoint(point: str) -> None:
        global seen
        if point == name:
            seen += 1
            if seen == wanted:
                sys.stdout.write(f"HALTED {point}\n")
                sys.stdout.flush()
                while True:
                    time.sleep(60)

    kwargs["checkpoint"] = checkpoint
    return run_archive(*args, **kwargs)


job.run_archive = _halting_run_archive

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
