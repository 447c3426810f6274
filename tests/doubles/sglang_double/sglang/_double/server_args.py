"""TEST DOUBLE of sglang.srt.server_args: the CLI flags of sglang==0.5.23 that kdtree-fleet uses.

Flags keep the real names, types and defaults. A flag the double does not know is rejected by
argparse with exit status 2, as the real parser rejects unknown flags. Prefix abbreviations work
(`--tp` for `--tp-size`) because argparse allows them, as in the real engine.
"""

from __future__ import annotations

import argparse

ATTENTION_BACKENDS = [
    "triton",
    "torch_native",
    "flex_attention",
    "flashinfer",
    "fa3",
    "fa4",
    "flashmla",
    "cutlass_mla",
    "trtllm_mla",
    "trtllm_mha",
    "aiter",
    "wave",
    "intel_amx",
    "ascend",
    "dual_chunk_flash_attn",
    "nsa",
]
SPECULATIVE_ALGORITHMS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO"]


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="sglang.launch_server (TEST DOUBLE of sglang==0.5.23)")
    add = p.add_argument
    # Model and tokenizer
    add("--model-path", "--model", type=str, required=True)
    add("--tokenizer-path", type=str, default=None)
    add("--tokenizer-mode", type=str, default="auto", choices=["auto", "slow"])
    add("--skip-tokenizer-init", action="store_true")
    add("--load-format", type=str, default="auto")
    add("--trust-remote-code", action="store_true")
    add("--context-length", type=int, default=None)
    add("--dtype", type=str, default="auto")
    add("--kv-cache-dtype", type=str, default="auto")
    add("--quantization", type=str, default=None)
    add("--served-model-name", type=str, default=None)
    add("--revision", type=str, default=None)
    add("--chat-template", type=str, default=None)
    add("--reasoning-parser", type=str, default=None)
    add("--tool-call-parser", type=str, default=None)
    # HTTP server
    add("--host", type=str, default="127.0.0.1")
    add("--port", type=int, default=30000)
    add("--api-key", type=str, default=None)
    # Memory and scheduling
    add("--mem-fraction-static", type=float, default=None)
    add("--max-running-requests", type=int, default=None)
    add("--max-total-tokens", type=int, default=None)
    add("--chunked-prefill-size", type=int, default=None)
    add("--max-prefill-tokens", type=int, default=16384)
    add("--schedule-policy", type=str, default="fcfs")
    add("--page-size", type=int, default=None)
    add("--disable-radix-cache", action="store_true")
    # Parallelism
    add("--device", type=str, default=None)
    add("--tp-size", "--tensor-parallel-size", type=int, default=1)
    add("--pp-size", "--pipeline-parallel-size", type=int, default=1)
    add("--dp-size", "--data-parallel-size", type=int, default=1)
    add("--ep-size", "--expert-parallel-size", type=int, default=1)
    add("--base-gpu-id", type=int, default=0)
    add("--gpu-id-step", type=int, default=1)
    add("--nnodes", type=int, default=1)
    add("--node-rank", type=int, default=0)
    add("--dist-init-addr", type=str, default=None)
    add("--nccl-port", type=int, default=None)
    add("--enable-dp-attention", action="store_true")
    # Kernels and backends
    add("--attention-backend", type=str, default=None, choices=ATTENTION_BACKENDS)
    add("--prefill-attention-backend", type=str, default=None, choices=ATTENTION_BACKENDS)
    add("--decode-attention-backend", type=str, default=None, choices=ATTENTION_BACKENDS)
    add("--sampling-backend", type=str, default=None)
    add("--disable-cuda-graph", action="store_true")
    add("--cuda-graph-bs", type=int, nargs="+", default=None)
    add("--enable-torch-compile", action="store_true")
    add("--enable-symm-mem", action="store_true")
    add("--enable-nccl-nvls", action="store_true")
    add("--disable-custom-all-reduce", action="store_true")
    add("--enable-deterministic-inference", action="store_true")
    # Speculative decoding
    add("--speculative-algorithm", type=str, default=None, choices=SPECULATIVE_ALGORITHMS)
    add("--speculative-draft-model-path", "--speculative-draft-model", type=str, default=None)
    add("--speculative-draft-model-revision", type=str, default=None)
    add("--speculative-num-steps", type=int, default=None)
    add("--speculative-eagle-topk", type=int, default=None)
    add("--speculative-num-draft-tokens", type=int, default=None)
    add("--speculative-accept-threshold-single", type=float, default=1.0)
    add("--speculative-accept-threshold-acc", type=float, default=1.0)
    add("--speculative-token-map", type=str, default=None)
    add("--speculative-attention-mode", type=str, default="prefill", choices=["prefill", "decode"])
    add("--speculative-draft-attention-backend", type=str, default=None)
    # Logging and misc
    add("--log-level", type=str, default="info")
    add("--log-level-http", type=str, default=None)
    add("--log-requests", action="store_true")
    add("--enable-metrics", action="store_true")
    add("--random-seed", type=int, default=None)
    add("--watchdog-timeout", type=float, default=300)
    add("--disable-overlap-schedule", action="store_true")
    add("--enable-mixed-chunk", action="store_true")
    return p


def prepare_server_args(argv: list[str]) -> argparse.Namespace:
    """Parse like sglang.srt.server_args.prepare_server_args (exit 2 on a bad flag)."""
    args = make_parser().parse_args(argv)
    if args.tokenizer_path is None:
        args.tokenizer_path = args.model_path
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    if args.speculative_algorithm == "NEXTN":
        args.speculative_algorithm = "EAGLE"
    return args


def scheduler_title(args: argparse.Namespace, tp_rank: int) -> tuple[str, str]:
    """(process title, log prefix) as the real run_scheduler_process builds them (no DP/PP/EP here)."""
    prefix = ""
    if args.tp_size > 1:
        prefix += f" TP{tp_rank}"
    if args.ep_size > 1:
        prefix += f" EP{tp_rank % args.ep_size}"
    return "sglang::scheduler" + prefix.replace(" ", "_"), prefix


def check_parallelism(args: argparse.Namespace) -> None:
    """What the double models: one DP and PP group; nnodes dividing the TP size, each node running its
    share of the TP ranks, as the real engine places them. Raises ValueError before anything starts."""
    if args.dp_size != 1 or args.pp_size != 1:
        raise ValueError("sglang test double: only --dp-size 1 --pp-size 1 are modelled")
    if args.nnodes < 1 or args.tp_size % args.nnodes:
        raise ValueError(f"--tp-size {args.tp_size} must be a multiple of --nnodes {args.nnodes}")
    if not 0 <= args.node_rank < args.nnodes:
        raise ValueError(f"--node-rank {args.node_rank} must be in [0, --nnodes {args.nnodes})")
    if args.nnodes > 1 and not args.dist_init_addr:
        raise ValueError("--dist-init-addr HOST:PORT is required when --nnodes > 1")


def node_tp_ranks(args: argparse.Namespace) -> range:
    """The TP ranks whose schedulers run on this node (all of them on one node)."""
    per_node = args.tp_size // args.nnodes
    return range(args.node_rank * per_node, (args.node_rank + 1) * per_node)
