"""Real SGLang wheel tests: `make test-sglang` runs them on the window's newest release
(.cache/sglang-venv), `make test-sglang-oldest` on its oldest (.cache/sglang-venv-oldest, the stack that
release pins); wheel_release.RELEASE says which.

TRITON_INTERPRET must be set before triton is imported, so it is set here, first.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

# The test files skip where torch or SGLang is absent (a bare `pytest tests` in the tools venv). Under
# make test-sglang / test-sglang-oldest (KDTREE_SGLANG_RELEASE set) a missing one is an error, never a skip.
if os.environ.get("KDTREE_SGLANG_RELEASE"):
    import sglang  # noqa: F401
    import torch  # noqa: F401
