"""Controller side of kdtree_smoke: run the host module in chunks and print progress between them.

Ansible shows a task's result only when it ends; a model load can take 15 minutes. Calling the
module for `chunk_s` seconds at a time lets this plugin print one progress line per chunk while the
module itself still polls every `poll_s`, so a crash fails the task within a poll interval.

Between chunks the module's `run` result (module_utils/_smoke/run.RunState) goes back as its internal
`_run` option (RUN_OPTION), so every chunk watches the same run. Internal options are underscored and
undocumented, as community.general's iptables_state does with `_back` and `_timeout`: only this plugin
sets them, and a task that sets one is refused before anything runs. `fail_on_error` is applied here:
a run that ends in state=failed fails the task unless it is false.
"""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.kdtree.fleet.plugins.module_utils._smoke.run import RUN_OPTION, RunState

MODULE = "kdtree.fleet.kdtree_smoke"

display = Display()


def internal_options(args: dict[str, Any]) -> list[str]:
    """The task's options that only this plugin may set (underscored: not in the module's documentation)."""
    return sorted(name for name in args if name.startswith("_"))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        internal = internal_options(self._task.args)
        if internal:
            raise AnsibleActionFail(
                f"{MODULE}: {', '.join(internal)} is internal (the action plugin sets it between chunks); "
                "a task cannot set it"
            )
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
                return _without_internal(result)
            changed = changed or bool(chunk.get("changed"))
            if chunk.get("state") != "pending":
                break
            display.display(f"  [{host}] {unit}: waiting {chunk.get('progress', '')}")
            module_args.update(
                {"restart": False, RUN_OPTION: RunState.from_option(chunk.get("run")).as_option()}
            )
        result.update(chunk)
        result["changed"] = changed
        if chunk.get("state") == "failed" and fail_on_error:
            result["failed"] = True
        return _without_internal(result)


def _without_internal(result: dict[str, Any]) -> dict[str, Any]:
    """The result without the internal options in its invocation (the run is in `run` already)."""
    module_args = (result.get("invocation") or {}).get("module_args")
    if isinstance(module_args, dict):
        for name in internal_options(module_args):
            del module_args[name]
    return result
