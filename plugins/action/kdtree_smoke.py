"""Controller side of kdtree_smoke: run the host module in chunks and print progress between them.

Ansible shows a task's result only when it ends; a model load can take 15 minutes. Calling the
module for `chunk_s` seconds at a time lets this plugin print one progress line per chunk while the
module itself still polls every `poll_s`, so a crash fails the task within a poll interval. The loop is
plugin_utils/_progress.run_chunks, shared with the other actions that wait.

Between chunks the module's `run` result (module_utils/_smoke/run.RunState) goes back as its internal
`_run` option (RUN_OPTION), so every chunk watches the same run. Internal options are underscored and
undocumented, as community.general's iptables_state does with `_back` and `_timeout`: only this plugin
sets them, and a task that sets one is refused before anything runs. `fail_on_error` is applied here:
a run that ends in state=failed fails the task unless it is false.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RUN_OPTION, RunState
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _progress as progress

MODULE = "kdtree.fleet.kdtree_smoke"

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        progress.refuse_internal(MODULE, self._task.args)
        result = super().run(tmp, task_vars)
        module_args = dict(self._task.args)
        fail_on_error = boolean(module_args.pop("fail_on_error", True), strict=False)
        host = (task_vars or {}).get("inventory_hostname", "?")
        unit = module_args.get("unit")
        chunk, changed = progress.run_chunks(
            lambda args: self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars),
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
