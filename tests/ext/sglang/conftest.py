"""Real SGLang wheel tests: `make test-sglang` runs them on the window's newest release
(.cache/sglang-venv), `make test-sglang-oldest` on its oldest (.cache/sglang-venv-oldest, the stack that
release pins); wheel_release.RELEASE says which.

TRITON_INTERPRET must be set before triton is imported, so it is set here, first.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"
