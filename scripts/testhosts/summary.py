"""Per-host summary after `make demo`: Ansible's recap plus what each test host runs now."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

from hostread import read_host

RECAP_RE = re.compile(
    r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+.*rescued=(\d+)"
)
log = logging.getLogger("fleet-summary")


def parse_recap(text: str) -> dict[str, dict[str, int]]:
    recap: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        match = RECAP_RE.match(line.strip())
        if match:
            host, ok, changed, unreachable, failed, rescued = match.groups()
            recap[host] = {
                "ok": int(ok),
                "changed": int(changed),
                "unreachable": int(unreachable),
                "failed": int(failed),
                "rescued": int(rescued),
            }
    return recap


def verdict(recap: dict[str, int] | None) -> str:
    if recap is None:
        return "not run"
    if recap["unreachable"]:
        return "UNREACHABLE"
    if recap["failed"]:
        return "FAILED, rolled back" if recap["rescued"] else "FAILED"
    return f"deployed (changed={recap['changed']})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log", type=Path, required=True, help="ansible-playbook output of the deploy")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    recap = parse_recap(args.log.read_text(encoding="utf-8", errors="replace"))
    hosts = sorted(recap) or ["kdtree-host1", "kdtree-host2", "kdtree-host3"]
    header = (
        f"{'HOST':<15} {'ENGINE':<13} {'ANSIBLE':<24} {'UNIT':<14} {'HEALTH':<7} {'ARCH':<8} {'BUILD':<17} "
        "SCHEDULERS (marker)"
    )
    lines = ["", "kdtree-fleet demo summary", header, "-" * len(header)]
    healthy = True
    for host in hosts:
        state = read_host(host)
        if "error" in state:
            lines.append(f"{host:<15} {'?':<13} {verdict(recap.get(host)):<24} unreadable: {state['error']}")
            healthy = False
            continue
        scheds = (
            ", ".join(f"{s['title'].removeprefix('sglang::')}={s['marker']}" for s in state["schedulers"])
            or "-"
        )
        unit = state["active"] + ("+kdtree" if state["dropin"] else "")
        lines.append(
            f"{host:<15} {state['engine']:<13} {verdict(recap.get(host)):<24} {unit:<14} "
            f"{state['health']:<7} {state['arch']:<8} {state['build']:<17} {scheds}"
        )
        healthy = healthy and state["health"] == "200"
    log.info("\n".join(lines))
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
