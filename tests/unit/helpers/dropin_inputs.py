"""The drop-in environment's inputs of a validate deploy, as the service role hands them to
module_utils/_dropin_env.env_pairs (its tests) and to the filter kdtree_dropin_env (the filter's tests).
Imported by its collection path (see collection_tree.py)."""

from __future__ import annotations

INPUTS = {
    "pythonpath": "/opt/kdtree/patches/v1",
    "mode": "validate",
    "lib": "/opt/kdtree/builds/b1/libkdtree_verify.so",
    "status_dir": "/run/kdtree-sglang",
    "status_interval": 5,
}
