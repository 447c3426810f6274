"""Read a local test host's state with `podman exec` (shared by the summary and the benchmarks).

The reading is the smoke check's own read_host() (plugins/module_utils/_smoke/host.py, imported
through the collection path of this clone): it and the module_utils it imports (HOST_SOURCES) are
stdlib only, so their source goes to the host's python3 as one program (host_source(): the files
without their imports of each other), followed by a few lines that
call it and print the snapshot as JSON. The markers are parsed with the host's installed marker.py,
as the smoke check parses them.
"""

from __future__ import annotations

import ast
import functools
import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "collections") not in sys.path:
    sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.kdtree.fleet.plugins.module_utils import (  # noqa: E402
    _http_client as http_client,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (  # noqa: E402
    _journal as journal,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (  # noqa: E402
    _patch_files as patch_files,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (  # noqa: E402
    _small_file as small_file,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (  # noqa: E402
    _unit_procs as unit_procs,
)
from ansible_collections.kdtree.fleet.plugins.module_utils import (  # noqa: E402
    _unit_socket as unit_socket,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import (  # noqa: E402
    host as smoke_host,
)

# read_host()'s module and what it imports, in the order one program defines them.
HOST_SOURCES = (http_client, journal, unit_socket, patch_files, small_file, unit_procs, smoke_host)


@functools.cache
def _role_defaults(role: str) -> dict[str, Any]:
    """A role's defaults, read from the role itself (the one owner): the test hosts use the defaults."""
    import yaml

    with open(ROOT / "roles" / role / "defaults" / "main.yml", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _role_default(role: str, name: str) -> Any:
    return _role_defaults(role)[name]


UNIT = _role_default("kdtree_service", "kdtree_service_name")
HEALTH_URL = (
    f"http://{_role_default('kdtree_service', 'kdtree_service_host')}:"
    f"{_role_default('kdtree_service', 'kdtree_service_port')}/health"
)
DROPIN = _role_default("kdtree_service", "kdtree_service_dropin_name")
# The patch version and the build a host runs are the ones its live drop-in names (PYTHONPATH's first
# entry, KDTREE_LIB's directory); "" = read them from the drop-in on the host.
PATCH_DIR = ""
BUILD_INFO = ""
DROPIN_PATH = f"/etc/systemd/system/{UNIT}.service.d/{DROPIN}"
EXEC_TIMEOUT_S = 60

# Appended to smoke_host.py's source on the host; the settings come first as one JSON literal.
DRIVER = r"""
import json as _json


def _marker(patch_dir):
    try:
        return load_marker(patch_dir)
    except MarkerError:
        return None  # no patch installed: no marker states


def _dropin_env(path):
    env = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line.startswith('Environment="') and line.endswith('"') and "=" in line[13:]:
                    key, _, value = line[13:-1].partition("=")
                    env[key] = value
    except OSError:
        pass
    return env


_DROPIN_ENV = _dropin_env(_SETTINGS["dropin_path"])
_PATCH_DIR = _SETTINGS["patch_dir"] or _DROPIN_ENV.get("PYTHONPATH", "").split(":")[0]
_BUILD_INFO = _SETTINGS["build_info"] or (
    _DROPIN_ENV["KDTREE_LIB"].rsplit("/", 1)[0] + "/BUILD_INFO" if _DROPIN_ENV.get("KDTREE_LIB") else ""
)


def _build_info(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return dict(item.split("=", 1) for item in handle.read().split() if "=" in item)
    except OSError:
        return {}


def _engine():
    # which SGLang the host's unit runs: the test double installs sglang-0.5.23+testdouble
    import glob

    found = glob.glob("/opt/sglang/venv/lib/python3*/site-packages/sglang-*.dist-info")
    if not found:
        return "-"
    version = found[0].rsplit("/", 1)[1][len("sglang-") : -len(".dist-info")]
    return "double" if "testdouble" in version else "real " + version


_query = Query(
    unit=_SETTINGS["unit"], health_url=_SETTINGS["health_url"], scheduler_prefix=_SETTINGS["scheduler_prefix"]
)
_snap = read_host(_query, _marker(_PATCH_DIR) if _PATCH_DIR else None)
print(
    _json.dumps(
        {"snapshot": _snap.to_dict(), "build_info": _build_info(_BUILD_INFO), "engine": _engine()}
    )
)
"""


def host_source() -> str:
    """HOST_SOURCES as one stdlib-only program: each file without its `from __future__` and
    `from ansible_collections...` imports (the names those import are defined above them)."""
    parts = ["from __future__ import annotations"]
    for module in HOST_SOURCES:
        source = inspect.getsource(module)
        drop: set[int] = set()
        for node in ast.parse(source).body:
            if isinstance(node, ast.ImportFrom) and (
                node.module == "__future__" or (node.module or "").startswith("ansible_collections.")
            ):
                drop.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        kept = [line for number, line in enumerate(source.splitlines(), 1) if number not in drop]
        parts.append("\n".join(kept))
    return "\n\n\n".join(parts) + "\n"


def host_script(
    unit: str = UNIT,
    health_url: str = HEALTH_URL,
    patch_dir: str = PATCH_DIR,
    build_info: str = BUILD_INFO,
    scheduler_prefix: str = smoke_host.SCHEDULER_PREFIX,
    dropin_path: str = DROPIN_PATH,
) -> str:
    """The program `python3 -` runs on the host: read_host's modules, the settings, the driver."""
    settings = {
        "unit": unit,
        "health_url": health_url,
        "patch_dir": patch_dir,
        "build_info": build_info,
        "scheduler_prefix": scheduler_prefix,
        "dropin_path": dropin_path,
    }
    return (
        host_source()
        + f"\n\n_SETTINGS = {json.dumps(settings)}\n"  # a JSON object is a Python dict literal
        + DRIVER
    )


def summarize(snap: smoke_host.Snapshot, build_info: dict[str, str], engine: str = "-") -> dict[str, Any]:
    """What summary.py prints for one host."""
    states = {marker.pid: marker.state for marker in snap.markers}
    return {
        "engine": engine,
        "active": snap.props.get("ActiveState"),
        "dropin": DROPIN in snap.props.get("DropInPaths", ""),
        "health": snap.health,
        "build": build_info.get("id", "-"),
        "arch": build_info.get("arch", "-"),
        "schedulers": [
            {"pid": proc.pid, "title": proc.title.split(" ")[0], "marker": states.get(proc.pid, "none")}
            for proc in snap.schedulers
        ],
    }


def read_host(name: str, unit: str = UNIT, health_url: str = HEALTH_URL, patch_dir: str = PATCH_DIR) -> dict:
    """State of one podman test host; {'error': ...} when it cannot be read."""
    try:
        proc = subprocess.run(
            ["podman", "exec", "-i", name, "python3", "-"],
            input=host_script(unit, health_url, patch_dir),
            capture_output=True,
            text=True,
            check=False,
            timeout=EXEC_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"podman exec did not finish within {EXEC_TIMEOUT_S} s"}
    if proc.returncode != 0:
        return {"error": proc.stderr.strip() or f"podman exec rc={proc.returncode}"}
    data = json.loads(proc.stdout)
    snap = smoke_host.Snapshot.from_dict(data["snapshot"])
    return summarize(snap, data["build_info"], data.get("engine", "-"))
