"""Attributes every kdtree.fleet module shares: check_mode, diff_mode and the platform.

A module extends C(kdtree.fleet.attributes) and sets only its support (and details) of check_mode
and diff_mode; C(kdtree.fleet.attributes.read_only) sets both for a module that changes nothing.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and return a prediction of C(changed) without modifying the host.
  diff_mode:
    description: Returns details on what has changed (or would change in check mode) when in diff mode.
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
    platforms: posix
    details: Linux hosts with systemd and C(/proc) (the GPU hosts of the kdtree fleet).
"""

    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: The module only reads; it does the same in check mode.
  diff_mode:
    support: none
    details: The module changes nothing, so there is nothing to diff.
"""
