"""Fast tests run against the torch-free SGLang test double (tests/doubles/sglang_double)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

DOUBLE_DIR = Path(__file__).resolve().parents[2] / "doubles" / "sglang_double"
if str(DOUBLE_DIR) not in sys.path:
    sys.path.insert(0, str(DOUBLE_DIR))


@pytest.fixture(autouse=True)
def _fresh_patch_state(monkeypatch):
    from kdtree_verify import marker, patch

    monkeypatch.delenv("KDTREE_STATUS_DIR", raising=False)
    patch.reset_for_tests()
    monkeypatch.setattr(marker, "_emitted", None)
    yield
    patch.reset_for_tests()
