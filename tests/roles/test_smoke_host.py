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
from ansible_collections.kdtree.fleet.tests.unit.helpers import fake_host
from conftest import PATCH_DIR, ROOT

pytestmark = pytest.mark.skipif(not Path("/proc/self/cgroup").exists(), reason="needs Linux /proc")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    return fake_host.install(tmp_path, monkeypatch)


@pytest.fixture
def scheduler():
    with fake_host.scheduler_process() as found:
        yield found


@pytest.fixture(scope="module")
def health_server():
    with fake_host.health_server() as url:
        yield url


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
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-"],
        input=driver,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert json.loads(out.stdout)["props"] == {}


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
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-"],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data = json.loads(out.stdout)
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
