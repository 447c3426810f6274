"""Lookup kdtree_bake_prometheus: the bake windows of hosts from the operator's Prometheus (in the
controller's process). The PromQL and the client are plugin_utils/_bake_prom.py's (one owner)."""

from __future__ import annotations

# Ansible's plugin layout: DOCUMENTATION, EXAMPLES and RETURN come before the imports.
# ruff: noqa: E402

DOCUMENTATION = r"""
name: kdtree_bake_prometheus
short_description: Bake windows of hosts read from a Prometheus
version_added: 1.2.0
author: kdtree-fleet contributors (!UNKNOWN)
description:
  - One window per host named in the terms - the increases of SGLang's and the kdtree patch's series
    over O(window_s) seconds ending at O(at), read with the PromQL of the collection's plugin_utils
    C(_bake_prom) (docs/bake.md lists it), on the series whose O(label) is the host, with or without a
    port.
  - A Prometheus that does not answer, or answers an error, gives each host a refused window saying so
    (the bake then refuses, never passes); a series Prometheus does not have is not published, never 0.
options:
  _terms:
    description: The hosts (as Prometheus's O(label) names them, without the port).
    type: list
    elements: str
    required: true
  url:
    description: The Prometheus base URL (http or https).
    type: str
    required: true
  window_s:
    description: The window's length in seconds.
    type: int
    required: true
  at:
    description: The window's end (Unix time).
    type: float
    required: true
  bearer_token:
    description: A bearer token (not with O(username)).
    type: str
    default: ""
  username:
    description: The basic-auth user.
    type: str
    default: ""
  password:
    description: The basic-auth password.
    type: str
    default: ""
  ca_path:
    description: A CA bundle for an https URL.
    type: str
    default: ""
  validate_certs:
    description: Check the server's certificate.
    type: bool
    default: true
  timeout_s:
    description: Seconds one query may take.
    type: float
    default: 10
  label:
    description: The label that names a host's target.
    type: str
    default: instance
"""

EXAMPLES = r"""
- name: Read the bake windows of two hosts
  ansible.builtin.set_fact:
    windows: "{{ lookup('kdtree.fleet.kdtree_bake_prometheus', 'gpu-1', 'gpu-2', url='http://prom:9090',
                 window_s=600, at=now(utc=true).timestamp(), wantlist=true) }}"
"""

RETURN = r"""
_raw:
  description: One window per term, in order (the input of the filter kdtree.fleet.kdtree_bake_verdict).
  type: list
  elements: dict
"""

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _bake as bake
from ansible_collections.kdtree.fleet.plugins.plugin_utils import _bake_prom as bake_prom


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: Any = None, **kwargs: Any) -> list[Any]:
        self.set_options(var_options=variables, direct=kwargs)
        try:
            prom = bake_prom.Prometheus(
                url=self.get_option("url"),
                bearer_token=self.get_option("bearer_token") or "",
                username=self.get_option("username") or "",
                password=self.get_option("password") or "",
                ca_path=self.get_option("ca_path") or "",
                validate_certs=bool(self.get_option("validate_certs")),
                timeout_s=float(self.get_option("timeout_s")),
                label=self.get_option("label"),
            )
        except bake.BakeInputError as exc:
            raise AnsibleLookupError(f"kdtree_bake_prometheus: {exc}") from exc
        window_s, at = int(self.get_option("window_s")), float(self.get_option("at"))
        if window_s <= 0:
            raise AnsibleLookupError(f"kdtree_bake_prometheus: window_s {window_s} is not a positive count")
        out = []
        for host in (str(term) for term in terms):
            try:
                out.append(bake_prom.window(prom, host, window_s, at).as_dict())
            except bake_prom.PromError as exc:
                out.append(bake.Window(hosts=[host], refused=str(exc)).as_dict())
        return out
