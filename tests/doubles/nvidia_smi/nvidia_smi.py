"""TEST DOUBLE of nvidia-smi for the CPU test hosts (kdtree-fleet): no GPU, no driver. Run through the
`nvidia-smi` wrapper beside it (install-double.sh links /usr/bin/nvidia-smi to it).

Answers the queries kdtree's GPU health check and report make, in the real tool's format:
  nvidia-smi --query-gpu=FIELD[,FIELD...] --format=csv[,noheader][,nounits] [-i INDEX]
  nvidia-smi --query-compute-apps=FIELD[,FIELD...] --format=csv[,noheader][,nounits]
Lines of ", "-separated values, one per GPU (or process); "[N/A]" for a field the GPU does not report;
an unknown field answers `Field "x" is not a valid field to query.` with rc 2, as the real tool does.

Driven by a small JSON file on the host, NVIDIA_SMI_DOUBLE_STATE (default
/etc/kdtree-testhost/nvidia-smi.json), so a test can make one node's GPUs bad:
  {"count": 8,                                  GPUs on the node (index 0..count-1)
   "gpus": {"3": {"persistence_mode": "Disabled", "ecc.errors.uncorrected.volatile.total": 2,
                  "remapped_rows.pending": "Yes", "memory.free": 100}},   per GPU: fields that differ
   "apps": [{"gpu": 0, "pid": 1234, "used_memory": 70000}],                compute processes
   "fail": {"rc": 9, "message": "..."},        every query fails like this
   "output": "raw text"}                       every query prints this (an answer that does not parse)
No file: the driver is absent (rc 9 and the real tool's message). The state is read on every call.
"""

from __future__ import annotations

import json
import os
import sys

STATE = os.environ.get("NVIDIA_SMI_DOUBLE_STATE", "/etc/kdtree-testhost/nvidia-smi.json")
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
    "latest NVIDIA driver is installed and running."
)
TOTAL_MIB = 81559  # an H100 80GB HBM3 as nvidia-smi reports it


def gpu_fields(index: int) -> dict[str, object]:
    return {
        "index": index,
        "name": "NVIDIA H100 80GB HBM3 (test double)",
        "uuid": f"GPU-00000000-0000-4000-8000-{index:012d}",
        "pci.bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "compute_cap": "12.0",
        "driver_version": "580.65.06",
        "persistence_mode": "Enabled",
        "memory.total": TOTAL_MIB,
        "memory.used": 0,
        "memory.free": TOTAL_MIB - 531,
        "ecc.mode.current": "Enabled",
        "ecc.errors.uncorrected.volatile.total": 0,
        "ecc.errors.uncorrected.aggregate.total": 0,
        "retired_pages.pending": "[N/A]",
        "remapped_rows.pending": "No",
        "remapped_rows.failure": "No",
    }


def app_fields(app: dict[str, object], gpus: list[dict[str, object]]) -> dict[str, object]:
    gpu = gpus[int(app.get("gpu", 0))]
    return {
        "gpu_uuid": gpu["uuid"],
        "gpu_bus_id": gpu["pci.bus_id"],
        "pid": app["pid"],
        "process_name": app.get("process_name", "python3"),
        "used_memory": app.get("used_memory", 0),
    }


def option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return None


def main(args: list[str]) -> int:
    try:
        with open(STATE, encoding="utf-8") as handle:
            state = json.load(handle)
    except FileNotFoundError:
        print(NO_DRIVER)
        return 9
    if state.get("fail"):
        print(state["fail"].get("message", NO_DRIVER))
        return int(state["fail"].get("rc", 9))
    if "output" in state:
        sys.stdout.write(str(state["output"]))
        return 0
    gpus = []
    for index in range(int(state.get("count", 8))):
        fields = gpu_fields(index)
        fields.update((state.get("gpus") or {}).get(str(index), {}))
        gpus.append(fields)
    wanted = option(args, "--query-gpu")
    rows, known = gpus, set(gpu_fields(0))
    if wanted is None:
        wanted = option(args, "--query-compute-apps")
        rows = [app_fields(app, gpus) for app in state.get("apps") or []]
        known = set(app_fields({"pid": 0}, [gpu_fields(0)]))
    elif option(args, "-i") is not None:
        rows = [row for row in rows if str(row["index"]) == option(args, "-i")]
    fmt = option(args, "--format") or ""
    if wanted is None or not fmt.startswith("csv"):
        print("nvidia-smi TEST DOUBLE: --query-gpu or --query-compute-apps, --format=csv", file=sys.stderr)
        return 2
    names = wanted.split(",")
    for name in names:
        if name not in known:
            print(f'Field "{name}" is not a valid field to query.')
            return 2
    if "noheader" not in fmt:
        print(", ".join(names))
    for row in rows:
        cells = []
        for name in names:
            value = str(row[name])
            if "nounits" not in fmt and (name.startswith("memory.") or name == "used_memory"):
                value += " MiB"
            cells.append(value)
        print(", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
