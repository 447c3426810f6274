"""Controller side of kdtree_smoke: run the host module in chunks and print progress between them.

Ansible shows a task's result only when it ends; a model load can take 15 minutes. Calling the
module for `chunk_s` seconds at a time lets this plugin print one progress line per chunk while the
module itself still polls every `poll_s`, so a crash fails the task within a poll interval.

Between chunks the module's `run` result (module_utils/_smoke_run.RunState) goes back as its `run`
option, so every chunk watches the same run. `fail_on_error` is applied here: a run that ends in
state=failed fails the task unless it is false.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke_run import RunState

MODULE = "kdtree.fleet.kdtree_smoke"

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        module_args = dict(self._task.args)
        fail_on_error = boolean(module_args.pop("fail_on_error", True), strict=False)
        host = (task_vars or {}).get("inventory_hostname", "?")
        unit = module_args.get("unit")
        changed = False
        while True:
            chunk = self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)
            if chunk.get("failed"):
                result.update(chunk)
                return result
            changed = changed or bool(chunk.get("changed"))
            if chunk.get("state") != "pending":
                break
            display.display(f"  [{host}] {unit}: waiting {chunk.get('progress', '')}")
            module_args.update(restart=False, run=RunState.from_option(chunk.get("run")).as_option())
        result.update(chunk)
        result["changed"] = changed
        if chunk.get("state") == "failed" and fail_on_error:
            result["failed"] = True
        return result
