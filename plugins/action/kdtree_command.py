"""kdtree_command: run a long command through ansible.builtin.command in the background (Ansible's
async) and print a progress line about every `progress_s` seconds until it ends.

A compile (up to 600 s) or a wait for another host's artifact (up to 1,200 s) would say nothing until
it ends. Started with async, the command runs on its host while this plugin polls async_status every
few seconds; the loop and the line are plugin_utils/_progress's, the smoke check's and the drain's. The
command module runs it, so rc, stdout, stderr, creates and check mode are that module's; the result is
the command's, without async_status's bookkeeping keys.
"""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.kdtree.fleet.plugins.modules.kdtree_command import ARGUMENT_SPEC
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _progress as progress

COMMAND = "ansible.legacy.command"
STATUS = "ansible.legacy.async_status"
FIRST_LOOK_S = 0.25  # the first look at the job; each next one twice as late, up to POLL_S (a quick
POLL_S = 2.0  # command costs little more than before, a long one a module run on its host every 2 s)
GRACE_S = 30  # after limit_s the job is killed by Ansible's async wrapper; this long without its result fails
BOOKKEEPING = ("ansible_job_id", "started", "finished", "results_file")

display = Display()


def command_args(args: dict) -> dict:
    """ansible.builtin.command's arguments for the task's argv or cmd (shell through executable)."""
    out: dict = (
        {"argv": args["argv"]} if args.get("argv") else {"_raw_params": args["cmd"], "_uses_shell": True}
    )
    if not args.get("argv"):
        out["executable"] = args["executable"]
    if args.get("creates"):
        out["creates"] = args["creates"]
    return out


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        progress.refuse_internal("kdtree.fleet.kdtree_command", self._task.args)
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(  # AnsibleActionFail when wrong
            argument_spec=ARGUMENT_SPEC,
            mutually_exclusive=[("argv", "cmd")],
            required_one_of=[("argv", "cmd")],
        )
        command = command_args(args)
        if self._task.check_mode:  # the command module says what it would do; nothing in the background
            result.update(self._execute_module(COMMAND, module_args=command, task_vars=task_vars))
            self._remove_tmp_path(self._connection._shell.tmpdir)
            return result
        started = time.monotonic()
        job = self._start(command, args["limit_s"], task_vars)
        if job.get("failed") or not job.get("ansible_job_id"):
            result.update(job)
            return result
        host = (task_vars or {}).get("inventory_hostname", "?")
        limit_s, every = args["limit_s"], max(0.1, args["progress_s"])
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        status = {"jid": job["ansible_job_id"], "_async_dir": async_dir}

        pause = [FIRST_LOOK_S]

        def look(_args: dict) -> dict:
            """The job's result once it ended, else state=pending when the next line is due."""
            due = time.monotonic() + every
            while True:
                time.sleep(max(0.05, min(pause[0], due - time.monotonic())))
                pause[0] = min(POLL_S, pause[0] * 2)
                seen = self._execute_module(STATUS, module_args=status, task_vars=task_vars)
                waited = time.monotonic() - started
                if seen.get("finished") or seen.get("failed") or seen.get("skipped"):
                    return seen
                if waited > limit_s + GRACE_S:
                    return {
                        "failed": True,
                        "msg": f"{args['what']}: no result {waited:.0f} s after its start",
                    }
                if time.monotonic() >= due:
                    return {"state": progress.PENDING, "progress": f"{waited:.0f} s of {limit_s} s"}

        done, _changed = progress.run_chunks(
            look,
            {},
            lambda _chunk: {},
            lambda chunk: display.display(progress.line(host, args["what"], chunk["progress"])),
        )
        self._execute_module(STATUS, module_args={**status, "mode": "cleanup"}, task_vars=task_vars)
        self._remove_tmp_path(self._connection._shell.tmpdir)
        result.update({k: v for k, v in done.items() if k not in BOOKKEEPING})
        result["waited_s"] = round(time.monotonic() - started, 3)
        if result.get("failed") and "rc" not in result and result["waited_s"] >= limit_s:
            # Ansible's async wrapper stopped the command at limit_s ("Timeout exceeded")
            result["msg"] = (
                f"{args['what']}: did not end within {limit_s} s and was stopped ({result.get('msg')})"
            )
        return result

    def _start(self, command: dict, limit_s: int, task_vars) -> dict:
        """Start the command module in the background for at most limit_s seconds (Ansible's async)."""
        before = self._task.async_val
        self._task.async_val = limit_s
        try:
            return self._execute_module(COMMAND, module_args=command, task_vars=task_vars, wrap_async=True)
        finally:
            self._task.async_val = before
