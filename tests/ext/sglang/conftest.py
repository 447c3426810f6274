"""Real sglang==0.5.23 wheel tests (run by `make test-sglang` inside .cache/sglang-venv).

TRITON_INTERPRET must be set before triton is imported, so it is set here, first.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"
