"""What ran in this process, as the status file's ``counters``: `STATE.counts` read without a lock
and named with short stable reason slugs (a Prometheus label value).

The dispatch counts per call with the full reason text (`dispatch.unsupported_reason` and friends:
one dict increment, nothing else); the slugs are made here, once per status write. A reason with no
slug of its own is counted as ``other`` (a test keeps every reason of `unsupported_reason` mapped).
"""

from __future__ import annotations

from typing import Any

from kdtree_verify.state import STATE

KERNEL = "kernel"
ORIGINAL_PREFIX = "original:"
VALIDATE = "validate"
VALIDATE_SKIPPED = "validate:skipped (first call under CUDA graph capture)"
RUNTIME_FALLBACK = "runtime_fallback"  # counted by dispatch._runtime_fallback
OTHER = "other"

# Reason text (dispatch.py) -> slug. Exact texts first; the texts that carry a value are matched by
# their start (REASON_PREFIX_SLUGS).
REASON_SLUGS: dict[str, str] = {
    "not target-verify": "not_verify",
    "draft runner": "draft_runner",
    "no k/v (read-back path)": "no_kv",
    "sinks/score_mod/aux_tensors": "sinks_score_mod",
    "not MLA": "not_mla",
    "dense fp8 chunked MHA": "dense_fp8_mha",
    "decode context parallel": "dcp",
    "deterministic inference": "deterministic",
    "dllm": "dllm",
    "page_size != 1": "page_size",
    "mha one-shot": "mha_one_shot",
    "logit cap": "logit_cap",
    "sliding window": "sliding_window",
    "not causal decoder attention": "not_causal",
    "xai temperature": "xai_temperature",
    "no forward metadata": "no_metadata",
    "more tokens than batch x max_extend_len": "too_many_tokens",
    "a request with more draft tokens than max_extend_len": "request_too_long",
    "kernel has no capability query": "no_capabilities",
    "kernel unavailable": "kernel_unavailable",  # the library failed to load, or the GPU is unsupported
    "kernel call failed": "kernel_error",
    "sglang outside the supported window": "untested_sglang",  # dispatch.UNTESTED_SGLANG, mode on
}
REASON_PREFIX_SLUGS: tuple[tuple[str, str], ...] = (
    ("not absorbed MLA", "shape"),
    ("kv cache dtype", "kv_dtype"),
    # the library's capability answer (kernel.Serves.dtype_problem): "q/k/v fp32, not bf16 (...)"
    ("q/k/v ", "dtype"),
    ("dispatch check failed", "check_error"),
)
# Not reasons of the dispatch, but what validate mode returns: the original's output.
VALIDATE_SLUGS = {VALIDATE: "validate", VALIDATE_SKIPPED: "validate_skipped_capture"}


def reason_slug(reason: str) -> str:
    """The short stable label for a reason text of the dispatch ('other' when it has none)."""
    slug = REASON_SLUGS.get(reason)
    if slug is not None:
        return slug
    for prefix, slug in REASON_PREFIX_SLUGS:
        if reason.startswith(prefix):
            return slug
    return OTHER


def from_counts(
    counts: dict[str, int], runtime_fallback_reason: str = "", kernel_calls_device: int | None = None
) -> dict[str, Any]:
    """The ``counters`` document of the status file from a copy of `STATE.counts`.

    ``kernel_calls``: calls whose output the kernel wrote (mode on). ``original_calls``: calls whose
    output the original method wrote, by slug; in validate mode ``validate`` counts the calls that
    were also run on the kernel and compared. Together they are every forward_extend call that went
    through Python; a call replayed from a CUDA graph does not (see docs/CONTRACTS.md section 3b).
    ``kernel_calls_device`` (present when given): the library's runs counted on the device (ABI 4
    call counter), CUDA graph replays included, in mode on and validate alike.
    """
    original: dict[str, int] = {}
    kernel_calls = 0
    runtime_fallbacks = 0
    for key, value in counts.items():
        if key == KERNEL:
            kernel_calls += value
        elif key == RUNTIME_FALLBACK:
            runtime_fallbacks += value
        else:
            if key in VALIDATE_SLUGS:
                slug = VALIDATE_SLUGS[key]
            elif key.startswith(ORIGINAL_PREFIX):
                slug = reason_slug(key[len(ORIGINAL_PREFIX) :])
            else:
                slug = OTHER
            original[slug] = original.get(slug, 0) + value
    doc: dict[str, Any] = {"kernel_calls": kernel_calls}
    if kernel_calls_device is not None:
        doc["kernel_calls_device"] = int(kernel_calls_device)
    doc.update(
        original_calls=dict(sorted(original.items())),
        runtime_fallbacks=runtime_fallbacks,
        runtime_fallback_reason=runtime_fallback_reason,
    )
    return doc


def snapshot(kernel_calls_device: int | None = None) -> dict[str, Any]:
    """This process's counters now (no lock: see `PatchState.count`); `kernel_calls_device` is the
    caller's read of the device counter (`VerifyKernel.device_calls`, the status publisher's)."""
    return from_counts(dict(STATE.counts), STATE.kernel_error, kernel_calls_device)


def read_device_calls(kernel: Any) -> int:
    """`kernel.device_calls()` (the loaded VerifyKernel), 0 when no library is loaded yet (no run
    counted) or the binding has no device counter. May raise (the caller keeps its last value)."""
    read = getattr(kernel, "device_calls", None)
    return int(read()) if read is not None else 0
