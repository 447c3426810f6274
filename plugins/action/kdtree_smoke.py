"""Controller side of kdtree_smoke: run the host module in chunks and print progress between them.

Ansible shows a task's result only when it ends; a model load can take 15 minutes. Calling the
module for `chunk_s` seconds at a time lets this plugin print one progress line per chunk while the
module itself still polls every `poll_s`, so a crash fails the task within a poll interval. The loop is
plugin_utils/_progress.run_chunks, shared with the other actions that wait.

Between chunks the module's `run` result (module_utils/_smoke/run.RunState) goes back as its internal
`_run` option (RUN_OPTION), so every chunk watches the same run. Internal options are underscored and
undocumented, as community.general's iptables_state does with `_back` and `_timeout`: only this plugin
sets them, and a task that sets one is refused before anything runs. `fail_on_error` is applied here:
a run that ends in state=failed fails the task unless it is false. `group` too: with a serving group,
between chunks the plugin reads whether another node of it posted to the group's rendezvous abort phase
(plugin_utils/_rendezvous) and then ends the watch, failed, naming that node.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RUN_OPTION, RunState
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _progress as progress
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _rendezvous as rendezvous

MODULE = "kdtree.fleet.kdtree_smoke"

display = Display()


def peer_watch(group: dict, host: str):
    """A function answering why this node's watch must end (another node of its serving group posted
    failed to the group's abort phase), or '' (also for no group)."""
    if not group:
        return lambda: ""
    name, members = str(group.get("name", "")), [str(m) for m in group.get("members") or []]
    peers = [m for m in members if m != host]
    if not name or not peers:
        return lambda: ""
    meeting = rendezvous.Rendezvous(name)

    def why() -> str:
        try:
            words = meeting.read(rendezvous.ABORT, peers)
        except rendezvous.RendezvousError as exc:
            return f"kdtree_smoke on {host}: the serving group's rendezvous cannot be read: {exc}"
        for peer, word in words.items():
            data = word.get("data") if isinstance(word.get("data"), dict) else {}
            return (
                f"kdtree_smoke on {host}: {peer} of serving group {name} failed "
                f"({str(data.get('why', 'no reason given')).strip()[:300]}): this node's run is not judged "
                "further, the group goes back together"
            )
        return ""

    return why


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        progress.refuse_internal(MODULE, self._task.args)
        result = super().run(tmp, task_vars)
        module_args = dict(self._task.args)
        fail_on_error = boolean(module_args.pop("fail_on_error", True), strict=False)
        group = module_args.pop("group", None) or {}
        host = (task_vars or {}).get("inventory_hostname", "?")
        unit = module_args.get("unit")
        peer_failed = peer_watch(group, host)
        calls = [0]

        def execute(args: dict) -> dict:
            calls[0] += 1
            if calls[0] > 1:
                word = peer_failed()
                if word:
                    return {"failed": True, "state": "failed", "msg": word}
            return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)

        chunk, changed = progress.run_chunks(
            execute,
            module_args,
            lambda chunk: {"restart": False, RUN_OPTION: RunState.from_option(chunk.get("run")).as_option()},
            lambda chunk: display.display(progress.line(host, unit, chunk.get("progress", ""))),
        )
        result.update(chunk)
        if chunk.get("failed"):
            return progress.without_internal(result)
        result["changed"] = changed
        if chunk.get("state") == "failed" and fail_on_error:
            result["failed"] = True
        return progress.without_internal(result)
