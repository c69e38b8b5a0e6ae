"""``python -m relay_pipeline`` and the file to hand to ``spark-submit``."""

from __future__ import annotations

import sys

from relay_pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
