"""Fast tests run against the torch-free SGLang test double (tests/doubles/sglang_double)."""

from __future__ import annotations

import sys
from pathlib import Path

DOUBLE_DIR = Path(__file__).resolve().parents[2] / "doubles" / "sglang_double"
if str(DOUBLE_DIR) not in sys.path:
    sys.path.insert(0, str(DOUBLE_DIR))
