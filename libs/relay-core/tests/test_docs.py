"""Operator docs that are generated must match the code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_configuration_doc_matches_the_settings_classes() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "config_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
