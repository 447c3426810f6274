"""bench/kernel_bench.py without a GPU: the roofline arithmetic and the goal verdicts it prints."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

import kernel_bench as kb
from kdtree_verify.kernel.shapes import HEAD_DIM_QK, HEAD_DIM_V


def _row(**kw) -> kb.Row:
    base = {
        "batch": 1, "n": 4, "prefix": 32768, "heads": 8, "kv_dtype": "bfloat16", "splits": 100,
        "kernel_us": 10.0, "kv_gbps": 1.0, "frac_peak": 0.9, "triton_us": 100.0, "speedup": 10.0,
        "max_abs_diff": 0.0,
    }  # fmt: skip
    return kb.Row(**{**base, **kw})


def test_roofline_is_the_larger_of_the_byte_and_the_flop_bounds():
    nbytes, flops, us = kb.roofline_us(1, 4, 32768, 8, 2, 4800.0, 989.0)
    assert (
        nbytes
        == 32768 * HEAD_DIM_QK * 2
        + 4 * 8 * (HEAD_DIM_QK + HEAD_DIM_V) * 2
        + 4 * (HEAD_DIM_QK + HEAD_DIM_V) * 2
    )
    assert flops == 2 * (HEAD_DIM_QK + HEAD_DIM_V) * 4 * 8 * (32768 + 4)
    assert us == pytest.approx(max(nbytes / 4.8e12, flops / 989e12) * 1e6)
    # H = 128, n = 16: compute-bound on an H200
    nbytes, flops, us = kb.roofline_us(1, 16, 32768, 128, 2, 4800.0, 989.0)
    assert us == pytest.approx(flops / 989e12 * 1e6) and flops / 989e12 > nbytes / 4.8e12


def test_goals_pass_and_fail_with_their_figures():
    verdicts = dict((text.split(" (")[0], v) for text, v in kb.goals([_row()]))
    assert verdicts == {
        ">= 80% of roofline at prefix >= 32k, H*n <= 64": "PASS",
        ">= 5x Triton at prefix >= 8k": "PASS",
        "never slower than Triton": "PASS",
    }
    rows = [_row(), _row(frac_peak=0.5), _row(prefix=1024, speedup=0.8), _row(prefix=8192, speedup=4.0)]
    got = kb.goals(rows)
    assert [v for _, v in got] == ["FAIL", "FAIL", "FAIL"]
    assert "worst 50%" in got[0][0] and "worst 4.00x" in got[1][0] and "worst 0.80x" in got[2][0]


def test_goals_without_triton_or_long_prefixes_say_not_measured():
    got = kb.goals([_row(prefix=1024, triton_us=None, speedup=None)])
    assert all(v.startswith("NOT MEASURED") for _, v in got)


def test_the_host_clock_s_cost_per_call_is_measured_and_small():
    cost = kb.timing_cost(calls=5000)
    # the CPU figure the kernel benchmark prints beside the CUDA one (docs/operations.md "Modes")
    assert 0 < cost["host_clock_us"] < 50, cost


def test_a_mixed_batch_s_roofline_counts_each_request_s_own_keys():
    prefixes = [131072] + [2048] * 7
    nbytes, flops, _us = kb.roofline_mixed(prefixes, 4, 8, 2, 4800.0, 989.0)
    assert (
        nbytes
        == sum(prefixes) * HEAD_DIM_QK * 2
        + 32 * 8 * (HEAD_DIM_QK + HEAD_DIM_V) * 2
        + 32 * (HEAD_DIM_QK + HEAD_DIM_V) * 2
    )
    assert flops == 2 * (HEAD_DIM_QK + HEAD_DIM_V) * 4 * 8 * sum(p + 4 for p in prefixes)
    assert kb.roofline_mixed([4096] * 3, 4, 8, 2, 4800.0, 989.0) == kb.roofline_us(
        3, 4, 4096, 8, 2, 4800.0, 989.0
    )


def test_a_mixed_batch_is_reported_but_not_judged_against_the_roofline():
    mixed = _row(frac_peak=0.1, prefixes=[131072] + [2048] * 7, batch=8, prefix=131072)
    verdicts = [v for _, v in kb.goals([_row(), mixed])]
    assert verdicts[0] == "PASS"  # the uniform row's 90%, not the mixed row's 10%
    assert kb.goals([mixed])[0][1].startswith("NOT MEASURED")


def test_the_plan_lists_the_mixed_batches_and_says_times_are_cold(capsys):
    args = kb.argparse.Namespace(
        quick=True, peak_gbps=None, peak_tflops=None, kv_dtype="bf16", lib="", block_m=0
    )
    kb.plan(kb.select_shapes(args), args)
    out = capsys.readouterr().out
    assert out.count("prefixes=") == 2 and "cold (L2 flushed" in out
    assert "balance: not computed (no --lib)" in out and "balance=" not in out
