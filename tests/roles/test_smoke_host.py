"""The test hosts' reader (scripts/testhosts/hostread.py, not shipped) on the smoke check's read_host
(plugins/module_utils/_smoke/host.py): it sends read_host's files to a host's bare python3 and reads a
fake host through them. read_host's own tests: tests/unit/plugins/module_utils/test__smoke_host.py.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.tests.unit.helpers.fake_host import (  # noqa: F401 (fixtures)
    fake_fixture,
    health_server_fixture,
    scheduler_fixture,
)
from conftest import PATCH_DIR, ROOT

pytestmark = pytest.mark.skipif(not Path("/proc/self/cgroup").exists(), reason="needs Linux /proc")


def bare_python(script: str, timeout: int) -> str:
    """`script` run by this Python isolated and without site (-I -S), as on a host's bare python3: its
    stdout."""
    argv = [sys.executable, "-I", "-S", "-"]
    out = subprocess.run(argv, input=script, capture_output=True, text=True, timeout=timeout, check=True)
    return out.stdout


def hostread_module():
    sys.path.insert(0, str(ROOT / "scripts" / "testhosts"))
    try:
        return importlib.import_module("hostread")
    finally:
        sys.path.remove(str(ROOT / "scripts" / "testhosts"))


def test_smoke_host_runs_standalone_without_ansible(tmp_path):
    """scripts/testhosts/hostread.py sends read_host's files to a host's bare python3: stdlib only."""
    driver = hostread_module().host_source() + textwrap.dedent(
        """
        import json
        snap = read_host(Query(unit="x"), parts=frozenset())
        print(json.dumps(snap.to_dict()))
        """
    )
    assert json.loads(bare_python(driver, timeout=30))["props"] == {}


def test_hostread_reads_a_host_with_read_host(hu, marker, fake, scheduler, health_server, tmp_path):
    """scripts/testhosts/hostread.py's program, run here the way `podman exec -i HOST python3 -` runs it."""
    hostread = hostread_module()
    assert hostread.smoke_host is hu
    pid, title = scheduler
    fake.props["DropInPaths"] = "/etc/systemd/system/sglang.service.d/50-kdtree.conf"
    fake.journal = [marker.format_line({"pid": pid, "state": "active", "title": title})]
    fake.write()
    build_info = tmp_path / "BUILD_INFO"
    build_info.write_text("id=20261129-abc arch=sm_120\n")
    script = hostread.host_script(
        unit="sglang",
        health_url=f"{health_server}/health",
        patch_dir=str(PATCH_DIR),
        build_info=str(build_info),
        scheduler_prefix=title,
    )
    data = json.loads(bare_python(script, timeout=60))
    state = hostread.summarize(hu.Snapshot.from_dict(data["snapshot"]), data["build_info"], data["engine"])
    assert data["engine"] in ("-", "double") or data["engine"].startswith("real ")
    assert state == {
        "engine": data["engine"],
        "active": "active",
        "dropin": True,
        "health": "200",
        "build": "20261129-abc",
        "arch": "sm_120",
        "schedulers": [{"pid": pid, "title": title, "marker": "active"}],
    }


# --- the journal read on from its cursor, bytes, suppression, the health port's owner ----------
