"""Lookup kdtree_build_cache: kdtree_build's checks of its controller build cache (in the controller's
process: no module run). The rules are plugin_utils/_build_cache.py's (one owner)."""

from __future__ import annotations

# Ansible's plugin layout: DOCUMENTATION, EXAMPLES and RETURN come before the imports.
# ruff: noqa: E402

DOCUMENTATION = r"""
name: kdtree_build_cache
short_description: Checks of kdtree_build's controller build cache, its artifacts and the host's libraries
version_added: 0.3.0
author: kdtree-fleet contributors (!UNKNOWN)
description:
  - The first term says what to check. V(cache) CACHE - the cache directory and every directory above it
    (a cache not made yet - the nearest one above it that exists) must be owned by the controller user or
    root, writable by nobody else, and the cache no symlink.
  - V(artifact) CACHE ID - the cache directory, every directory above
    it, and the artifact of build ID in it (its directory, artifact.json, libkdtree_verify.so) must be
    owned by the controller user or root, writable by nobody else, and no symlinks.
  - V(host_lib) PATH STAT - a host's build library (STAT is its C(stat -c '%u %a %F') line) must be a
    regular file owned by root, writable by nobody else.
  - V(run) - the run a compile claim names (the controller's ansible-playbook process and its start time).
options:
  _terms:
    description: What to check, then its arguments.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Read the artifact of a build, checked
  ansible.builtin.set_fact:
    checked: "{{ lookup('kdtree.fleet.kdtree_build_cache', 'artifact', cache_dir, build_id) }}"
"""

RETURN = r"""
_raw:
  description:
    - V(artifact) - a dict, C(problem) (empty when the cache and the artifact may be used) and C(artifact)
      (the parsed artifact.json, empty when the cache holds none for the build).
    - V(cache), V(host_lib) - the problem (empty when the library may be used).
    - V(run) - the run as JSON.
  type: list
  elements: raw
"""

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _build_cache as build_cache


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[Any]:
        what, args = (str(terms[0]), [str(term) for term in terms[1:]]) if terms else ("", [])
        if what == "artifact" and len(args) == 2:
            problem, record = build_cache.read_artifact(args[0], args[1])
            return [{"problem": problem, "artifact": record}]
        if what == "cache" and len(args) == 1:
            return [build_cache.cache_problem(args[0])]
        if what == "host_lib" and len(args) == 2:
            return [build_cache.host_lib_problem(args[0], args[1])]
        if what == "run" and not args:
            return [build_cache.controller_run()]
        raise AnsibleLookupError(
            "kdtree_build_cache: use 'cache' CACHE, 'artifact' CACHE ID, 'host_lib' PATH STAT or 'run', got "
            + repr([what, *args])
        )
