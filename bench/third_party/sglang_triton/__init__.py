"""SGLang 0.5.23's Triton verify kernel (`extend_attention_fwd`) without installing SGLang.

`extend_attention.py` here is the file `sglang/kernels/ops/attention/extend_attention.py` of the pinned
wheel (sglang==0.5.23), byte for byte (75,393 bytes, sha256 in WHEEL_SHA256; tests/kernel/
test_sglang_triton_cpu.py checks it against the wheel when the wheel is installed). It imports four
SGLang names; `load()` provides them while the file is executed (copies of the wheel's two helpers,
`_extract_kv_strides` and `unpack_aux_tensors`, the two environment flags it reads, off, and the
platform probes), then removes the stand-ins from sys.modules, so a real SGLang imported later is not
shadowed. A GPU machine with torch + triton but no network can then run the Triton column of
`make gpu-check`.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import types
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
VENDORED = HERE / "extend_attention.py"
WHEEL_VERSION = "0.5.23"
WHEEL_SHA256 = "be3baffc80ef9fe484d0b896842522b02bf671785088e05a66ca4dcdb2e8a9b3"
MODULE = "sglang.kernels.ops.attention.extend_attention"


def _extract_kv_strides(buf, page_size: int):
    """Copy of sglang 0.5.23 kernels/ops/attention/decode_attention.py `_extract_kv_strides`."""
    if buf.ndim != 3:
        raise ValueError(f"unexpected KV buffer ndim={buf.ndim}, shape={buf.shape}")
    slot_stride = buf.stride(0)
    head_stride = buf.stride(1)
    page_stride = slot_stride * page_size
    tok_stride = slot_stride
    return slot_stride, head_stride, page_stride, tok_stride


def unpack_aux_tensors(score_mod, aux_tensors):
    """Copy of sglang 0.5.23 kernels/ops/attention/score_mod.py `unpack_aux_tensors`."""
    if score_mod is None:
        return None, 0, 0, 0
    assert aux_tensors is not None and len(aux_tensors) == 1
    aux0 = aux_tensors[0]
    return aux0, aux0.stride(0), aux0.stride(1), aux0.shape[2]


class _Flag:
    def __init__(self, value: bool) -> None:
        self.value = value

    def get(self) -> bool:
        return self.value


def _stand_ins() -> dict[str, types.ModuleType]:
    import torch

    mods = {
        name: types.ModuleType(name)
        for name in (
            "sglang",
            "sglang.kernels",
            "sglang.kernels.ops",
            "sglang.kernels.ops.attention",
            "sglang.kernels.ops.attention.decode_attention",
            "sglang.kernels.ops.attention.score_mod",
            "sglang.srt",
            "sglang.srt.environ",
            "sglang.srt.utils",
        )
    }
    mods["sglang.kernels.ops.attention.decode_attention"]._extract_kv_strides = _extract_kv_strides
    mods["sglang.kernels.ops.attention.score_mod"].unpack_aux_tensors = unpack_aux_tensors
    # The two flags extend_attention.py reads; both default to off in 0.5.23 and are ROCm paths.
    mods["sglang.srt.environ"].envs = types.SimpleNamespace(
        SGLANG_TRITON_FP8_PREFILL_ATTN=_Flag(False), SGLANG_TRITON_COMPACT_EXTEND_ATTENTION=_Flag(False)
    )
    utils = mods["sglang.srt.utils"]
    utils.is_cuda = lambda: bool(torch.version.cuda) and torch.cuda.is_available()
    utils.is_hip = lambda: torch.version.hip is not None
    utils.is_gfx95_supported = lambda: False
    utils.is_gfx1250_supported = lambda: False
    return mods


def load() -> Any:
    """The vendored module (its `extend_attention_fwd` is SGLang's); raises ImportError without triton."""
    mods = _stand_ins()
    saved = {name: sys.modules.get(name) for name in [*mods, MODULE]}
    try:
        sys.modules.update(mods)
        spec = importlib.util.spec_from_file_location(MODULE, VENDORED)
        module = importlib.util.module_from_spec(spec)
        sys.modules[MODULE] = module
        spec.loader.exec_module(module)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    log.debug("loaded SGLang %s extend_attention.py from %s", WHEEL_VERSION, VENDORED)
    return module


def extend_attention_fwd() -> tuple[Any, str]:
    """(extend_attention_fwd, where it came from): the installed SGLang's if importable, else the vendored
    copy of the pinned wheel's file."""
    try:
        from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd as fwd

        return fwd, "installed sglang"
    except Exception as exc:  # no sglang, or an import-time failure inside it
        log.debug("installed sglang not usable (%s); using the vendored file", exc)
    return load().extend_attention_fwd, f"vendored sglang {WHEEL_VERSION} extend_attention.py"
