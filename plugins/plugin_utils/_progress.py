"""The action plugins' chunk loop: run a module that waits in chunks, print one progress line between
chunks (controller side).

Ansible shows a task's result only when it ends. A module that waits long returns after each chunk
with state=pending and a `progress` text; run_chunks() prints `  [host] label: waiting <progress>`
(the smoke check's style) and calls it again with what the next chunk needs (`follow`), until a chunk
is not pending or fails. Internal options (underscored, undocumented, as community.general's
iptables_state does with `_back` and `_timeout`) are set by the action plugin only: refuse_internal()
refuses a task that sets one before anything runs, without_internal() leaves them out of the
invocation a result shows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible.errors import AnsibleActionFail

PENDING = "pending"


def internal_options(args: dict[str, Any]) -> list[str]:
    """The task's options that only the action plugin may set (underscored: not in the documentation)."""
    return sorted(name for name in args if name.startswith("_"))


def refuse_internal(module: str, args: dict[str, Any]) -> None:
    """AnsibleActionFail naming the internal options a task set (before anything runs)."""
    internal = internal_options(args)
    if internal:
        raise AnsibleActionFail(
            f"{module}: {', '.join(internal)} is internal (the action plugin sets it between chunks); "
            "a task cannot set it"
        )


def line(host: str, label: str, progress: str) -> str:
    """The progress line between two chunks."""
    return f"  [{host}] {label}: waiting {progress}"


def run_chunks(
    execute: Callable[[dict[str, Any]], dict[str, Any]],
    module_args: dict[str, Any],
    follow: Callable[[dict[str, Any]], dict[str, Any]],
    say: Callable[[dict[str, Any]], None],
) -> tuple[dict[str, Any], bool]:
    """Call execute(args) until a chunk is not pending: (the last chunk, whether any chunk changed
    something). A failed chunk ends the loop at once. Between chunks say(chunk) prints its line and
    the next call's args are module_args updated with follow(chunk)."""
    args = dict(module_args)
    changed = False
    while True:
        chunk = execute(args)
        if chunk.get("failed"):
            return chunk, changed
        changed = changed or bool(chunk.get("changed"))
        if chunk.get("state") != PENDING:
            return chunk, changed
        say(chunk)
        args.update(follow(chunk))


def without_internal(result: dict[str, Any]) -> dict[str, Any]:
    """The result without the internal options in its invocation."""
    module_args = (result.get("invocation") or {}).get("module_args")
    if isinstance(module_args, dict):
        for name in internal_options(module_args):
            del module_args[name]
    return result
