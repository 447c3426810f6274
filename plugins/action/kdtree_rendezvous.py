"""kdtree_rendezvous: post this host's word for a phase and wait for the other members' (on the
controller; the store and the wait are plugin_utils/_rendezvous's)."""

from __future__ import annotations

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.kdtree.fleet.plugins.modules.kdtree_rendezvous import ARGUMENT_SPEC
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _rendezvous as rendezvous

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        host = (task_vars or {}).get("inventory_hostname", "?")
        try:
            rendezvous.sweep(keep=rendezvous.run_key())
            meeting = rendezvous.Rendezvous(args["name"])
            if args["state"] is not None:
                meeting.post(args["phase"], host, args["state"], args["data"])
            last = [0.0]

            def say(waited: float, missing: list[str]) -> None:
                if waited - last[0] >= args["progress_s"]:
                    last[0] = waited
                    display.display(
                        f"[{host}] {args['name']} {args['phase']}: waiting {waited:.0f} s of "
                        f"{args['timeout_s']:.0f} s for {', '.join(missing)}"
                    )

            seen = meeting.wait(args["phase"], args["members"], max(0.0, args["timeout_s"]), on_wait=say)
        except rendezvous.RendezvousError as exc:
            raise AnsibleActionFail(f"kdtree_rendezvous {args['name']}/{args['phase']}: {exc}") from None
        result.update(seen.as_result())
        result["changed"] = False
        return result
