"""module_utils/_small_file.py, the one reader of small files root reads that another user may control:
regular files only, no link followed unless asked, never blocking on a FIFO, never past its cap; and the
readers that use it (the venv's METADATA / .pth / pyvenv.cfg, the status files, kdtree's drop-in, an
EnvironmentFile=) answer at once where a planted FIFO used to hang the deploy with the host's lock held."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from ansible_collections.kdtree.fleet.plugins.module_utils import _history_call as history_call
from ansible_collections.kdtree.fleet.plugins.module_utils import _preflight as preflight
from ansible_collections.kdtree.fleet.plugins.module_utils import _venv as venv
from ansible_collections.kdtree.fleet.plugins.module_utils._small_file import (
    SmallFileRefused,
    read_head,
    read_small,
)
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke import host as smoke_host

PROMPT_S = 5.0


def answer_within(seconds: float, call, *args, **kwargs):
    """call(*args) in a daemon thread: ("ok", value) or ("raised", exception) when it returns within
    `seconds`; a test failure when it is still blocked (as the old readers were, on a FIFO)."""
    box: list = []

    def run() -> None:
        try:
            box.append(("ok", call(*args, **kwargs)))
        except Exception as exc:  # pylint: disable=broad-exception-caught  # handed to the test
            box.append(("raised", exc))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"{getattr(call, '__name__', call)} still blocked after {seconds} s")
    return box[0]


def test_a_regular_file_is_read_whole(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"a=1\n" * 10)
    assert read_small(str(path)) == b"a=1\n" * 10
    assert read_head(str(path), 3) == b"a=1"


def test_a_fifo_is_refused_at_once_without_a_writer(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    kind, value = answer_within(PROMPT_S, read_small, str(fifo), follow=True)
    assert kind == "raised" and isinstance(value, SmallFileRefused) and "a FIFO" in str(value)


def test_a_link_is_refused_unless_followed_and_a_device_even_when_followed(tmp_path):
    link = tmp_path / "zero"
    link.symlink_to("/dev/zero")
    with pytest.raises(SmallFileRefused, match="symbolic link"):
        read_small(str(link))
    with pytest.raises(SmallFileRefused, match="character device"):
        read_small(str(link), follow=True)


def test_a_file_past_the_cap_is_refused_not_read_in_part(tmp_path):
    path = tmp_path / "big"
    path.write_bytes(b"x" * 101)
    with pytest.raises(SmallFileRefused, match="101 bytes, more than the 100"):
        read_small(str(path), max_bytes=100)
    assert read_small(str(path), max_bytes=101) == b"x" * 101


def test_a_directory_and_a_missing_file_are_told_apart(tmp_path):
    with pytest.raises(SmallFileRefused, match="a directory"):
        read_small(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        read_small(str(tmp_path / "absent"))


# ---- the readers that use it ------------------------------------------------------------------------


def make_venv(root: Path) -> venv.Venv:
    (root / "bin").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    site = root / "lib" / "python3.11" / "site-packages"
    (site / "sglang-0.5.23.dist-info").mkdir(parents=True)
    (site / "sglang-0.5.23.dist-info" / "METADATA").write_text("Name: sglang\nVersion: 0.5.23\n\nbody\n")
    return venv.venv_of(str(root / "bin" / "python"))


def test_a_fifo_planted_as_sglangs_metadata_is_refused_not_waited_on(tmp_path):
    found = make_venv(tmp_path / "v")
    metadata = Path(found.site_packages) / "sglang-0.5.23.dist-info" / "METADATA"
    metadata.unlink()
    os.mkfifo(metadata)
    kind, value = answer_within(PROMPT_S, venv.installed_version, found, "sglang")
    assert kind == "raised" and isinstance(value, venv.VenvError) and "a FIFO" in str(value)


def test_a_pth_file_that_is_a_fifo_or_a_link_refuses_the_venv(tmp_path):
    found = make_venv(tmp_path / "v")
    site = Path(found.site_packages)
    os.mkfifo(site / "planted.pth")
    kind, value = answer_within(PROMPT_S, venv.pth_paths, found)
    assert kind == "raised" and isinstance(value, venv.VenvError) and "planted.pth" in str(value)
    (site / "planted.pth").unlink()
    (site / "planted.pth").symlink_to("/dev/zero")
    with pytest.raises(venv.VenvError, match="symbolic link"):
        venv.pth_paths(found)


def test_a_pyvenv_cfg_that_is_a_fifo_refuses_the_venv(tmp_path):
    make_venv(tmp_path / "v")
    cfg = tmp_path / "v" / "pyvenv.cfg"
    cfg.unlink()
    os.mkfifo(cfg)
    kind, value = answer_within(PROMPT_S, venv.venv_of, str(tmp_path / "v" / "bin" / "python"))
    assert kind == "raised" and isinstance(value, venv.VenvError)


def test_a_status_file_that_is_a_fifo_is_no_status_at_once(tmp_path):
    os.mkfifo(tmp_path / f"{os.getpid()}.json")
    status_file = smoke_host._status_file  # pylint: disable=protected-access
    kind, value = answer_within(PROMPT_S, status_file, str(tmp_path), os.getpid())
    assert (kind, value) == ("ok", None)


def test_kdtrees_drop_in_replaced_by_a_link_is_refused(tmp_path):
    (tmp_path / "secret").write_text("root only\n")
    (tmp_path / "50-kdtree.conf").symlink_to(tmp_path / "secret")
    with pytest.raises(SmallFileRefused, match="symbolic link"):
        history_call.live_digest(str(tmp_path / "50-kdtree.conf"))
    assert history_call.live_digest(str(tmp_path / "absent.conf")) == ""


def test_an_environment_file_that_is_a_fifo_gives_no_entries_at_once(tmp_path):
    os.mkfifo(tmp_path / "env")
    kind, value = answer_within(PROMPT_S, preflight.env_file_entries, str(tmp_path / "env"))
    assert (kind, value) == ("ok", (str(tmp_path / "env"), []))
