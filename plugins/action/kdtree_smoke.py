"""Controller side of kdtree_smoke: run the host module in chunks and print progress between them.

Ansible shows a task's result only when it ends; a model load can take 15 minutes. Calling the
module for `chunk_s` seconds at a time lets this plugin print one progress line per chunk while the
module itself still polls every `poll_s`, so a crash fails the task within a poll interval.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

# Arguments only the action plugin understands (the module never sees them).
ACTION_ONLY = ("fail_on_error",)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        fail_on_error = bool(args.pop("fail_on_error", True))
        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"
        changed = False
        module_args = dict(args)
        while True:
            chunk = self._execute_module(
                module_name="kdtree_smoke", module_args=module_args, task_vars=task_vars
            )
            if chunk.get("failed"):
                result.update(chunk)
                return result
            changed = changed or bool(chunk.get("changed"))
            state = chunk.get("state")
            if state != "pending":
                break
            display.display(f"  [{host}] {args.get('unit')}: waiting {chunk.get('progress', '')}")
            module_args.update(
                restart=False,
                invocation_id=chunk["invocation_id"],
                baseline_nrestarts=chunk["baseline_nrestarts"],
                started_at=chunk["started_at"],
            )
        result.update(chunk)
        result["changed"] = changed
        if state == "failed" and fail_on_error:
            result["failed"] = True
        return result
