"""Record what a real systemd makes of every unit in
tests/unit/plugins/module_utils/data/unit_corpus (issue 19).

For each case directory: install its unit.service as kdtree-corpus.service in a test-host container
(systemd as PID 1), daemon-reload, and write `systemctl show` of the properties the preflight reads to
<case>/expected.json. tests/unit/plugins/module_utils/test_unit_corpus.py checks the project's reader
against each recording without a container.

Usage: record_unit_corpus.py [--container NAME]   (default: start kdtree-units-rec from
$KDTREE_TESTHOST_IMAGE or localhost/kdtree-testhost:bookworm, and remove it afterwards)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "tests/unit/plugins/module_utils/data/unit_corpus"
UNIT = "kdtree-corpus.service"
PROPS = (
    "ExecStart",
    "Environment",
    "EnvironmentFiles",
    "WorkingDirectory",
    "User",
    "Group",
    "DynamicUser",
    "NeedDaemonReload",
)
PODMAN = ["podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs"]
TIMEOUT_S = 60


def sh(container: str, script: str) -> str:
    return subprocess.run(
        [*PODMAN, "exec", container, "bash", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=TIMEOUT_S,
    ).stdout


def start(name: str) -> None:
    image = os.environ.get("KDTREE_TESTHOST_IMAGE", "localhost/kdtree-testhost:bookworm")
    subprocess.run(
        [*PODMAN, "run", "--detach", "--name", name, "--privileged", "--systemd=always", image],
        check=True,
        timeout=TIMEOUT_S,
        capture_output=True,
    )
    for _ in range(120):
        state = subprocess.run(
            [*PODMAN, "exec", name, "systemctl", "is-system-running"], capture_output=True, text=True
        ).stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise SystemExit(f"record_unit_corpus: systemd in {name} did not come up")


def record(container: str, case: Path) -> dict:
    unit_text = (case / "unit.service").read_text(encoding="utf-8")
    setup = "rm -rf /etc/kdtree-corpus; mkdir -p /etc/kdtree-corpus/kdtree-corpus;"
    for env_file in sorted((case / "files").glob("*")) if (case / "files").is_dir() else []:
        target = env_file.name.replace("__", "/")
        setup += f"mkdir -p $(dirname /{target}); printf %s {json.dumps(env_file.read_text())} > /{target};"
    props = " ".join(f"-p {p}" for p in PROPS)
    out = sh(
        container,
        f"{setup} cat > /etc/systemd/system/{UNIT} <<'KDTREE_EOF'\n{unit_text}KDTREE_EOF\n"
        f"systemctl daemon-reload; systemctl show {props} {UNIT}",
    )
    show: dict[str, str] = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        show[key] = f"{show[key]}\n{value}" if key in show else value
    facts = sh(container, "hostname; getent passwd root | cut -d: -f6; systemctl --version | head -1")
    hostname, root_home, version = facts.splitlines()[:3]
    return {
        "unit": UNIT,
        "systemd": version,
        "context": {"hostname": hostname, "root_home": root_home},
        "show": show,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--container", default="")
    args = parser.parse_args()
    container = args.container or "kdtree-units-rec"
    if not args.container:
        start(container)
    try:
        for case in sorted(p for p in CORPUS.iterdir() if (p / "unit.service").is_file()):
            expected = record(container, case)
            (case / "expected.json").write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")
            print(f"record_unit_corpus: {case.name}: recorded ({expected['systemd']})")
        sh(container, f"rm -f /etc/systemd/system/{UNIT}; systemctl daemon-reload")
    finally:
        if not args.container:
            subprocess.run(
                [*PODMAN, "rm", "-f", "-t", "5", container], capture_output=True, timeout=TIMEOUT_S
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
