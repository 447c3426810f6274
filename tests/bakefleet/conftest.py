"""The bake's fleet tests import the local test fleet's helpers (scripts/testhosts: drainfleet, traffic,
playrun), as the drain's traffic tests do."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "testhosts"))
