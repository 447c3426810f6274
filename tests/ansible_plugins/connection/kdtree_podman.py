"""Connection plugin for the test hosts only: containers.podman.podman with pipelining.

The podman connection runs `podman exec` without `-i`, so it cannot pipe a module into the
container and declares has_pipelining = False: every module task then costs four podman calls
(make a temporary directory, copy the module, run it, remove the directory). This subclass adds
`-i` when there is input and declares pipelining, so with `ansible_pipelining: true` a module task
is one `podman exec -i ... python3` fed the module on stdin. On a two-core CI machine that is most of
what a molecule scenario spends outside its hosts.

Test infrastructure, not part of the product: the collection's roles never name it (build_ignore
keeps tests/ out of the tarball); the test inventory (inventory/local) and molecule's base select it.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection

DOCUMENTATION = """
    name: kdtree_podman
    short_description: Run tasks in a local podman test host, with pipelining
    description:
      - The test hosts' connection (tests/ansible_plugins/connection/kdtree_podman.py).
      - containers.podman.podman with C(podman exec -i) when a command has input, so pipelining works.
    options:
      remote_addr:
        description: The container's name or ID.
        default: inventory_hostname
        vars:
          - name: ansible_host
          - name: inventory_hostname
          - name: ansible_podman_host
      remote_user:
        description: The user the commands run as inside the container (default the container's).
        ini:
          - section: defaults
            key: remote_user
        env:
          - name: ANSIBLE_REMOTE_USER
        vars:
          - name: ansible_user
      podman_extra_args:
        description: Arguments put before the podman command (C(--log-level debug), C(--root ...)).
        default: ''
        vars:
          - name: ansible_podman_extra_args
        env:
          - name: ANSIBLE_PODMAN_EXTRA_ARGS
      podman_executable:
        description: The podman binary.
        default: podman
        vars:
          - name: ansible_podman_executable
        env:
          - name: ANSIBLE_PODMAN_EXECUTABLE
      pipelining:
        description: Pipe modules into the container instead of copying them (one podman call a task).
        type: boolean
        default: false
        ini:
          - section: defaults
            key: pipelining
        env:
          - name: ANSIBLE_PIPELINING
        vars:
          - name: ansible_pipelining
"""


class Connection(PodmanConnection):
    """containers.podman.podman, plus `exec -i` for a command with input (pipelining)."""

    transport = "kdtree_podman"
    has_pipelining = True

    def _podman(
        self, cmd: Any, cmd_args: Any = None, in_data: bytes | None = None, use_container_id: bool = True
    ):
        if in_data is not None and isinstance(cmd, list) and cmd and cmd[0] == "exec":
            cmd = ["exec", "-i", *cmd[1:]]
        return super()._podman(cmd, cmd_args, in_data, use_container_id)
