"""Helpers shared by the sglang_ext tests (importable: tests/ext is on sys.path via conftest)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from kdtree_verify.kernel.shapes import HEAD_DIM_QK

ROOT = Path(__file__).resolve().parents[2]
EXT_DIR = ROOT / "files" / "sglang_ext"
DOUBLE_DIR = ROOT / "tests" / "doubles" / "sglang_double"


def clean_env(**extra: str) -> dict[str, str]:
    """This run's environment minus KDTREE_*/PYTHON*/SGLANG_* variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KDTREE_", "PYTHON", "SGLANG_"))}
    env.update(extra)
    return env


def run_python(
    python: str | Path, args: list[str], env: dict[str, str], cwd: Path | None = None, timeout=120
):
    return subprocess.run(
        [str(python), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


class FakeTensor:
    """Just enough of a tensor for the torch-free dispatch tests: shape, dtype name, views."""

    def __init__(self, shape: tuple[int, ...], dtype: str = "torch.bfloat16", device: str = "cpu") -> None:
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device

    def view(self, *shape: int) -> FakeTensor:
        return self

    def new_empty(self, shape: tuple[int, ...]) -> FakeTensor:
        return FakeTensor(shape, self.dtype, self.device)

    def clone(self) -> FakeTensor:
        return FakeTensor(self.shape, self.dtype, self.device)

    def div_(self, scale: Any) -> FakeTensor:
        self.divided_by = scale
        return self


class RecordingPool:
    """Records set_kv_buffer calls; hands out a KV buffer of the given dtype."""

    def __init__(self, kv_dtype: str = "torch.bfloat16") -> None:
        self.writes: list[tuple] = []
        self.buffer = FakeTensor((64, 1, HEAD_DIM_QK), kv_dtype)

    def set_kv_buffer(self, layer: Any, loc: Any, k: Any, v: Any, *scales: Any) -> None:
        self.writes.append((layer.layer_id, loc, k, v, scales))

    def get_key_buffer(self, layer_id: int) -> FakeTensor:
        return self.buffer

    def get_value_buffer(self, layer_id: int) -> FakeTensor:
        return self.buffer
