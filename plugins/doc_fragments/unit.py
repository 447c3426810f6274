"""Options of the SGLang unit that several kdtree.fleet modules take.

C(kdtree.fleet.unit): the unit name without C(.service) and its scheduler processes (the smoke check
and the report). C(kdtree.fleet.unit.unit_file): the unit name with its suffix, for the modules that
read the unit's files (the preflight, the unit environment).
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  unit:
    description: Unit name without C(.service).
    type: str
    required: true
  scheduler_prefix:
    description: Process title prefix of the scheduler processes.
    type: str
    default: "sglang::scheduler"
"""

    UNIT_FILE = r"""
options:
  unit:
    description: Unit name with its suffix, for example V(sglang.service).
    type: str
    required: true
"""
