"""The actions' chunk loop (plugins/plugin_utils/_progress.py): one line per pending chunk, the next
call's args from the chunk before, a failed chunk ends it, and internal options are refused from tasks
and left out of the invocation."""

from __future__ import annotations

import copy

import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _progress as progress


def loop(chunks: list[dict], **args):
    calls: list[dict] = []
    said: list[str] = []

    def execute(call_args: dict) -> dict:
        calls.append(copy.deepcopy(call_args))
        return chunks.pop(0)

    last, changed = progress.run_chunks(
        execute,
        {"a": 1, **args},
        lambda chunk: {"_seen": chunk["progress"]},
        lambda chunk: said.append(progress.line("gpu1", "drain", chunk["progress"])),
    )
    return last, changed, calls, said


def test_each_pending_chunk_prints_one_line_and_hands_its_state_to_the_next_call() -> None:
    chunks = [
        {"state": "pending", "progress": "10 s of 300 s", "changed": True},
        {"state": "pending", "progress": "20 s of 300 s"},
        {"waited_s": 23.0},
    ]
    last, changed, calls, said = loop(chunks)
    assert said == ["  [gpu1] drain: waiting 10 s of 300 s", "  [gpu1] drain: waiting 20 s of 300 s"]
    assert calls == [{"a": 1}, {"a": 1, "_seen": "10 s of 300 s"}, {"a": 1, "_seen": "20 s of 300 s"}]
    assert last == {"waited_s": 23.0}
    assert changed is True  # the first chunk's change counts although the last changed nothing


def test_a_wait_that_ends_in_its_first_chunk_prints_nothing() -> None:
    _last, changed, calls, said = loop([{"changed": False}])
    assert said == [] and len(calls) == 1 and changed is False


def test_a_failed_chunk_ends_the_loop_even_when_pending() -> None:
    chunks = [{"state": "pending", "progress": "p"}, {"failed": True, "state": "pending", "msg": "gone"}, {}]
    last, _changed, calls, said = loop(chunks)
    assert last["msg"] == "gone" and len(calls) == 2 and len(said) == 1


@pytest.mark.parametrize("name", ["_waited_s", "_run"])
def test_a_task_that_sets_an_internal_option_is_refused_naming_it(name: str) -> None:
    with pytest.raises(AnsibleActionFail, match=rf"kdtree.fleet.x: {name} is internal"):
        progress.refuse_internal("kdtree.fleet.x", {"action": "wait_idle", name: 1})
    progress.refuse_internal("kdtree.fleet.x", {"action": "wait_idle"})


def test_the_invocation_shown_leaves_the_internal_options_out() -> None:
    result = {"invocation": {"module_args": {"action": "remove", "_waited_s": 12.5}}}
    assert progress.without_internal(result)["invocation"]["module_args"] == {"action": "remove"}
