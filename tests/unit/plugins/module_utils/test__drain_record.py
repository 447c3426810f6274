"""The drain record a killed run may have left (plugins/module_utils/_drain_record.py): read only when it
is a regular file owned by root or the deploying user, not group/world-writable, small, never through a
link and without blocking; its URLs only compared with the inventory's (a planted record naming another
router or worker is refused, never acted on). Through the kdtree_router module's action record too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _drain_record as drain_record
from ansible_collections.kdtree.fleet.plugins.module_utils import _router as router
from ansible_collections.kdtree.fleet.plugins.modules import kdtree_router

ROUTER = "http://router.example:30000"
WORKER = "http://gpu1.example:30000"
RECORD = {
    "run_id": "run-1",
    "mode": "sglang_router",
    "worker_url": WORKER,
    "health_url": "http://127.0.0.1:30000/health",
    "router_url": ROUTER,
    "since": "2026-12-02T10:00:00+00:00",
}


def write(path: Path, record: object, mode: int = 0o600) -> Path:
    path.write_text(record if isinstance(record, str) else json.dumps(record))
    path.chmod(mode)
    return path


def module_params(path: Path, **more) -> dict:
    base = {
        "action": "record",
        "record_path": str(path),
        "router_url": ROUTER,
        "worker_url": WORKER,
        "rejoin_hooks": False,
        "api_key": "",
    }
    base.update(more)
    return base


def test_a_record_matching_the_inventory_gives_its_mode_and_run_only(tmp_path: Path) -> None:
    path = write(tmp_path / "drain.json", RECORD)
    result = kdtree_router.run(module_params(path, worker_url="HTTP://GPU1.example:030000/"), False)[0]
    assert result == {
        "changed": False,
        "found": True,
        "record": {"mode": "sglang_router", "run_id": "run-1", "since": RECORD["since"]},
    }
    result = kdtree_router.run(module_params(tmp_path / "none.json"), False)[0]
    assert result == {"changed": False, "found": False}


@pytest.mark.parametrize(
    ("planted", "inventory", "says"),
    [
        ({"router_url": "http://evil.example:30000"}, {}, "names the router 'http://evil.example:30000'"),
        ({"worker_url": "http://evil.example:30000"}, {}, "names the worker 'http://evil.example:30000'"),
        ({"router_url": "http://[::1:8000/"}, {}, "not a valid URL"),
        ({}, {"router_url": ""}, "the inventory names no router"),
        ({"mode": "hooks"}, {}, "no rejoin hook"),
        ({"mode": "shell"}, {}, "not one this collection writes"),
        ({"worker_url": 7}, {}, "names no worker_url"),
    ],
)
def test_a_record_naming_anything_else_than_the_inventory_is_refused(
    tmp_path: Path, planted: dict, inventory: dict, says: str
) -> None:
    path = write(tmp_path / "drain.json", {**RECORD, **planted})
    with pytest.raises(drain_record.RecordRefused) as info:
        kdtree_router.run(module_params(path, **inventory), False)
    assert says in str(info.value) and "not acted on" in str(info.value)


def test_only_a_safe_regular_file_is_read(tmp_path: Path) -> None:
    good = write(tmp_path / "good.json", RECORD)
    assert drain_record.read(str(good)) == RECORD
    link = tmp_path / "link.json"
    link.symlink_to(good)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    loose = write(tmp_path / "loose.json", RECORD, 0o622)
    group = write(tmp_path / "group.json", RECORD, 0o620)
    large = write(tmp_path / "large.json", {**RECORD, "pad": "x" * drain_record.MAX_BYTES})
    deep = write(tmp_path / "deep.json", "[" * 30000 + "]" * 30000)
    listed = write(tmp_path / "list.json", [RECORD])
    garbage = write(tmp_path / "garbage.json", "\x00\xff not json")
    cases = {
        link: "symbolic link",
        fifo: "a FIFO, not a regular file",
        tmp_path: "a directory, not a regular file",
        loose: "group- or world-writable",
        group: "group- or world-writable",
        large: "more than the 65536",
        deep: "nested too deeply",
        listed: "not a JSON object",
        garbage: "not JSON",
    }
    for path, says in cases.items():
        with pytest.raises(drain_record.RecordRefused, match=says):
            drain_record.read(str(path))
    with pytest.raises(drain_record.RecordRefused, match=r"not by root or the deploying user \(uid 4243\)"):
        drain_record.read(str(good), owners={4243})
    if os.geteuid() == 0:
        os.chown(good, 4242, -1)
        with pytest.raises(drain_record.RecordRefused, match="owned by uid 4242"):
            drain_record.read(str(good))


def test_refusals_are_router_errors_the_module_reports() -> None:
    assert issubclass(drain_record.RecordRefused, router.RouterError)
