"""The preflight's unit checks as the unit tests run them (module_utils/_preflight.run_checks): no
probe, the sglang check skipped. Imported by its collection path (see collection_tree.py)."""

from __future__ import annotations

from ansible_collections.kdtree.fleet.plugins.module_utils import _preflight as preflight

# the variables kdtree's drop-in sets, as the tests' units name them
MANAGED = ["PYTHONPATH", "KDTREE_VERIFY", "KDTREE_LIB", "NCCL_ALGO"]


def run_unit_checks(
    unit: preflight.Unit, cc: str = "12.0", skip: list[str] | None = None, managed: list[str] | None = None
) -> list[preflight.Check]:
    """preflight.run_checks on `unit` as these tests run it: no probe, the sglang check skipped; the
    variables kdtree manages are `managed` (None: MANAGED)."""
    return preflight.run_checks(
        unit,
        managed_vars=MANAGED if managed is None else managed,
        exec_start_override=[],
        compute_capability=cc,
        served_backend="triton",
        supported_versions=("0.5.23",),
        probe_env=None,
        skip=["sglang", *(skip or [])],
        timeout_s=5,
    )
