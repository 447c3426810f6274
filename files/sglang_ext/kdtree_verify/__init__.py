"""kdtree-verify: SGLang's target-verify attention on the kdtree CUDA kernel.

`install()`, `uninstall()` and `status()` live in `kdtree_verify.inject.lifecycle`; they are re-exported
lazily so that importing this package at interpreter start-up (from sitecustomize) costs nothing.
"""

from __future__ import annotations

__all__ = ["install", "status", "uninstall"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from kdtree_verify.inject import lifecycle

        return getattr(lifecycle, name)
    raise AttributeError(f"module 'kdtree_verify' has no attribute {name!r}")
