"""`python -m kdtree_verify.probe`: the documented command; the probe is `kdtree_verify.inject.probe`."""

from __future__ import annotations

import sys

from kdtree_verify.inject.probe import main

if __name__ == "__main__":
    sys.exit(main())
