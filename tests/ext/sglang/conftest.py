"""Real sglang==0.5.23 wheel tests (run by `make test-sglang` inside .cache/sglang-venv).

TRITON_INTERPRET must be set before triton is imported, so it is set here, first.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import pytest


@pytest.fixture(autouse=True)
def _fresh_patch_state(monkeypatch):
    from kdtree_verify import marker, patch

    monkeypatch.delenv("KDTREE_STATUS_DIR", raising=False)
    patch.reset_for_tests()
    monkeypatch.setattr(marker, "_emitted", None)
    yield
    patch.reset_for_tests()
