"""TEST DOUBLE log set-up with SGLang's format: `[YYYY-mm-dd HH:MM:SS TP<r>] message`."""

from __future__ import annotations

import logging
import sys


def configure_logger(prefix: str = "", level: str = "info") -> None:
    """Mirror of sglang.srt.utils.configure_logger: one stderr handler, SGLang's line format."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"[%(asctime)s{prefix}] %(message)s", "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
