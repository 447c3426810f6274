"""make bench-noop: a second deploy over the three local test hosts; wall time and changed=0.

The first deploy brings the hosts to the deployed state (it may compile); the second one is timed
and must change nothing.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

# the local test fleet's helpers (run a playbook, read its recap) live with the fleet's scripts
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "testhosts"))
from playrun import parse_recap, run_playbook

log = logging.getLogger("bench-noop")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", default="double-hosts")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="bench-noop: %(message)s")
    first = run_playbook("deploy.yml", args.limit, echo=False)
    if first.rc != 0:
        log.error("the first deploy failed (rc=%s):\n%s", first.rc, first.text[-4000:])
        return 1
    log.info(
        "first deploy: %.1f s, changed=%d",
        first.seconds,
        sum(r["changed"] for r in parse_recap(first.text).values()),
    )
    second = run_playbook("deploy.yml", args.limit, echo=False)
    recap = parse_recap(second.text)
    changed = sum(r["changed"] for r in recap.values())
    for host, counts in sorted(recap.items()):
        log.info("%s %s", host, counts)
    print(f"noop_wall_s={second.seconds:.1f} hosts={len(recap)} changed={changed} rc={second.rc}")
    return 0 if second.rc == 0 and changed == 0 and len(recap) == 3 else 1


if __name__ == "__main__":
    sys.exit(main())
