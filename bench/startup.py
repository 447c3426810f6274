"""`python -c pass` start-up cost of the kdtree sitecustomize hook (target: < 5 ms over a plain start).

Runs plain and hooked starts interleaved (A B A B ...) so drift hits both, and prints the medians
and the median of the pairwise differences, for each interpreter given (default: this python,
and Debian's /usr/bin/python3 when present, where the hook also chains to the distro sitecustomize).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

EXT_DIR = Path(__file__).resolve().parents[1] / "files" / "sglang_ext"
TARGET_MS = 5.0
log = logging.getLogger("bench-startup")


def one_start(python: str, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([python, "-c", "pass"], env=env, check=True)
    return (time.perf_counter() - t0) * 1000.0


def bench(python: str, runs: int) -> dict[str, float]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KDTREE_"))}
    hooked = dict(
        base, PYTHONPATH=str(EXT_DIR), KDTREE_VERIFY="on", KDTREE_LIB="/nonexistent/libkdtree_verify.so"
    )
    for _ in range(5):  # warm the page cache
        one_start(python, base)
        one_start(python, hooked)
    plain_ms, hook_ms, diffs = [], [], []
    for _ in range(runs):
        a = one_start(python, base)
        b = one_start(python, hooked)
        plain_ms.append(a)
        hook_ms.append(b)
        diffs.append(b - a)
    return {
        "plain": statistics.median(plain_ms),
        "hooked": statistics.median(hook_ms),
        "overhead": statistics.median(diffs),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("pythons", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(format="%(name)s: %(message)s")
    pythons = args.pythons or [sys.executable] + (
        ["/usr/bin/python3"] if Path("/usr/bin/python3").exists() else []
    )
    if not (EXT_DIR / "sitecustomize.py").is_file():  # a wrong path would measure a plain start twice
        print(f"bench-startup: {EXT_DIR}/sitecustomize.py does not exist", file=sys.stderr)
        return 2
    worst = 0.0
    for python in pythons:
        r = bench(python, args.runs)
        worst = max(worst, r["overhead"])
        print(
            f"bench-startup: {python}: plain {r['plain']:.2f} ms, with hook {r['hooked']:.2f} ms, "
            f"overhead (median of {args.runs} pairs) {r['overhead']:+.2f} ms (target < {TARGET_MS:.0f} ms)"
        )
    print(f"bench-startup: worst median overhead {worst:+.2f} ms")
    if worst >= TARGET_MS:
        log.error("the hook costs %.2f ms a start, the target is < %.0f ms", worst, TARGET_MS)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
