"""The SGLang release these real-wheel tests run on: the one make asked for (KDTREE_SGLANG_RELEASE:
mk/ext.mk reads the window's newest and oldest from target.SGLANG_RELEASES, their one owner), which
must be the venv's installed sglang and a release of the window (test_real_wheel checks both)."""

from __future__ import annotations

import importlib.metadata as md
import os

from kdtree_verify import target


def _installed() -> str | None:
    try:
        return md.version("sglang")
    except md.PackageNotFoundError:
        return None


INSTALLED = _installed()
RELEASE = os.environ.get("KDTREE_SGLANG_RELEASE") or INSTALLED
# How this release's forward_extend builds its KVWriteLoc (None: not a release of the window).
KV_WRITE_FORM = target.SGLANG_RELEASES.get(RELEASE or "")
