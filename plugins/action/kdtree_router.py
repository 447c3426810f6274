"""Controller side of kdtree_router: run the module's waits in chunks and print progress between them.

The drain's wait for in-flight requests (kdtree_drain_timeout_s, 300 s by default) and the router's
queued remove/add (kdtree_drain_router_timeout_s) would say nothing until they end. The module waits at
most `chunk_s` seconds per call and returns state=pending with a `progress` text; this plugin prints
`  [host] drain: waiting <progress>` (rejoin for V(add)) and calls it again with the seconds waited so
far as the internal `_waited_s` option (module_utils/_chunk), measured here so that the transport's
time counts against the wait's limit too. Actions that do not wait run in one call as before.
"""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.kdtree.fleet.plugins.module_utils._chunk import WAITED_OPTION
from ansible_collections.kdtree.fleet.plugins.module_utils._router import ASKED_OPTION
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _progress as progress

MODULE = "kdtree.fleet.kdtree_router"
LABELS = {"add": "rejoin"}  # the line's label per action; the others take the host out: drain

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        progress.refuse_internal(MODULE, self._task.args)
        result = super().run(tmp, task_vars)
        host = (task_vars or {}).get("inventory_hostname", "?")
        label = LABELS.get(str(self._task.args.get("action")), "drain")
        started = time.monotonic()
        chunk, changed = progress.run_chunks(
            lambda args: self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars),
            dict(self._task.args),
            # a pending V(add) says in `changed` whether it asked the router yet: the next call must not again
            lambda chunk: {
                WAITED_OPTION: round(time.monotonic() - started, 3),
                ASKED_OPTION: bool(chunk.get("changed")),
            },
            lambda chunk: display.display(progress.line(host, label, chunk.get("progress", ""))),
        )
        result.update(chunk)
        if not chunk.get("failed"):
            result["changed"] = changed
        return progress.without_internal(result)
