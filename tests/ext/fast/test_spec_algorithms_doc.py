"""docs/operations.md's table of SGLang 0.5.23's speculative algorithms says what the dispatch does.

Every algorithm of the pin is a row; a row's "served" verify calls are served by `unsupported_reason`
(a tree-masked call, and DFLASH's causal block without a mask); every reason the table quotes for a
draft's calls is exactly what `unsupported_reason` returns for such a call (DFLASH's draft runner in
target-verify mode, EAGLE's draft extend)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from extlib import FakeTensor
from kdtree_verify import dispatch
from kdtree_verify.kernel.shapes import HEAD_DIM_QK, HEAD_DIM_V
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from test_patch_double import RecordingKernel, make_backend, mla_layer

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "operations.md"
# SpeculativeAlgorithm of sglang 0.5.23 (srt/speculative/spec_info.py; NONE is no algorithm) and the
# alias from_string() maps to EAGLE
ALGORITHMS_0_5_23 = {"DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM"}
ALIASES = {"NEXTN"}
T, H = 8, 16


def table() -> dict[str, dict[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    body = text.split("<!-- spec-algorithms -->", 1)[1].split("<!-- /spec-algorithms -->", 1)[0]
    lines = [line for line in body.strip().splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = dict(zip(head, (c.strip() for c in line.strip("|").split("|")), strict=True))
        for name in re.findall(r"`([A-Z0-9_]+)`", cells[head[0]]):
            rows[name] = cells
    return rows


# What a call of each kind looks like at forward_extend (tests/engine, the real engine on a CPU).
def reason_of(mode: ForwardMode, *, draft: bool, mask: bool, monkeypatch) -> str | None:
    monkeypatch.setattr(dispatch, "_loaded_kernel", lambda: RecordingKernel())
    backend = make_backend(is_draft=draft, use_mla=True)
    if not mask:
        backend.forward_metadata.custom_mask = None
    q, k, v = FakeTensor((T, H, HEAD_DIM_QK)), FakeTensor((T, 1, HEAD_DIM_QK)), FakeTensor((T, 1, HEAD_DIM_V))
    batch = ForwardBatch(forward_mode=mode, batch_size=2, out_cache_loc="slots")
    return dispatch.unsupported_reason(backend, q, k, v, mla_layer(), batch, None, None, None)


# each reason the table may quote, and the call that must get it
DRAFT_CALLS = {
    "draft runner": {"mode": ForwardMode.TARGET_VERIFY, "draft": True, "mask": False},  # DFLASH's draft
    "not target-verify": {"mode": ForwardMode.DRAFT_EXTEND_V2, "draft": True, "mask": False},  # EAGLE's
}


def test_every_algorithm_of_the_pin_has_a_row():
    assert set(table()) == ALGORITHMS_0_5_23 | ALIASES


@pytest.mark.parametrize("name", sorted(ALGORITHMS_0_5_23 | ALIASES))
def test_the_rows_served_verify_calls_are_served_and_its_quoted_reasons_are_the_dispatchs(name, monkeypatch):
    row = table()[name]
    verify, draft = row["the target's verify calls"], row["the draft's attention calls"]
    if verify.startswith("served"):
        causal = "no custom mask" in verify
        got = reason_of(ForwardMode.TARGET_VERIFY, draft=False, mask=not causal, monkeypatch=monkeypatch)
        assert got is None, (name, got)
    quoted = re.findall(r"`([a-z][a-z -]+)`", draft)
    assert quoted or "no draft model" in draft or "as for" in draft, (name, draft)
    for reason in quoted:
        assert reason in DRAFT_CALLS, f"{name}: `{reason}` is no reason this test knows"
        assert reason_of(**DRAFT_CALLS[reason], monkeypatch=monkeypatch) == reason, (name, reason)
