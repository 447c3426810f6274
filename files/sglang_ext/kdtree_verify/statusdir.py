"""`python -m kdtree_verify.statusdir`: the documented command; the reader is
`kdtree_verify.telemetry.statusdir` (stdlib only; hosts also run or load that file by its path)."""

from __future__ import annotations

import sys

from kdtree_verify.telemetry.statusdir import main

if __name__ == "__main__":
    sys.exit(main())
