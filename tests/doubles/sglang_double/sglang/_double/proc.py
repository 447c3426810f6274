"""TEST DOUBLE process helpers: process titles, parent-death signal, killing a process tree."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
from pathlib import Path

logger = logging.getLogger(__name__)

_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1


def _prctl(option: int, arg: int | bytes) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def set_process_title(title: str) -> str:
    """Set the title like SGLang's setproctitle call. Returns which mechanism was used.

    With the `setproctitle` module (what the real engine uses) /proc/PID/cmdline and `ps` show
    the title. Without it only /proc/PID/comm (15 bytes) changes; cmdline keeps the interpreter's.
    """
    try:
        import setproctitle
    except ImportError:
        _prctl(_PR_SET_NAME, title.encode()[:15])
        logger.warning("test double: setproctitle not installed; only /proc/self/comm set to %r", title)
        return "comm"
    setproctitle.setproctitle(title)
    return "setproctitle"


def kill_itself_when_parent_died() -> None:
    """Mirror of sglang.srt.utils.kill_itself_when_parent_died (PR_SET_PDEATHSIG=SIGKILL)."""
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))


def _children_map() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command name, which may contain spaces.
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def descendants(pid: int) -> list[int]:
    tree = _children_map()
    out: list[int] = []
    todo = list(tree.get(pid, []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(tree.get(child, []))
    return out


def kill_process_tree(parent_pid: int, include_parent: bool = True) -> None:
    """Mirror of sglang.srt.utils.kill_process_tree: SIGKILL every descendant, then the parent."""
    for child in descendants(parent_pid):
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if include_parent:
        os.kill(parent_pid, signal.SIGKILL)
