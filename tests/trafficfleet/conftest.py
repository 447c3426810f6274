"""The traffic fleet's tests import the local test fleet's helpers (scripts/testhosts: drainfleet, traffic,
playrun), as make bench-drain does."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "testhosts"))
