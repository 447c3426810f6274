"""Greedy generation with Hugging Face transformers on the tiny model, compared with a server's /generate.

Run with the engine venv's python (it has torch and transformers):
    .cache/sglang-venv/bin/python tests/engine/reference_generate.py --model DIR \
        [--prompt 3,40,50 ...] [--max-new-tokens 16] [--server http://127.0.0.1:30000]

For every prompt (token ids, comma-separated; three fixed prompts by default) the reference is plain
greedy decoding: at each step the argmax of the last position's logits of a full forward pass over the
whole sequence (no KV cache, EOS ignored), in float32 on the CPU. With --server it also POSTs
{"input_ids": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": N, "ignore_eos": true}}
to /generate and compares output_ids token for token. Prints one JSON object per prompt on stdout
(prompt, reference, server, equal, first_diff with the reference's top-2 logit gap there, latency_s)
and a summary line; exit status 1 when a server answer differs.
--server-cmd runs the POST through a command instead of urllib (e.g. `podman exec HOST curl ...`):
the JSON body is appended as the last argument. --concurrent sends every prompt's request at once
(one thread each), so that the server batches them (verify at batch size > 1).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import shlex
import subprocess
import sys
import time
import urllib.request

DEFAULT_PROMPTS = [
    [3, 40, 50, 60, 70, 80],
    [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21],
    [100, 200, 300, 400, 500, 100, 200, 300, 400, 500],
]


def reference(model, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    import torch

    ids = list(prompt)
    gaps = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            top = torch.topk(logits, 2)
            gaps.append(float(top.values[0] - top.values[1]))
            ids.append(int(top.indices[0]))
    return ids[len(prompt) :], gaps


def ask_server(args, prompt: list[int], n: int) -> tuple[list[int], float]:
    body = json.dumps(
        {
            "input_ids": prompt,
            "sampling_params": {"temperature": 0, "max_new_tokens": n, "ignore_eos": True},
        }
    )
    t0 = time.monotonic()
    if args.server_cmd:
        out = subprocess.run(
            [*shlex.split(args.server_cmd), body], check=True, capture_output=True, text=True
        ).stdout
    else:
        req = urllib.request.Request(
            args.server.rstrip("/") + "/generate",
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=300) as resp:
            out = resp.read().decode()
    return json.loads(out)["output_ids"], time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt", action="append", help="token ids, comma-separated (repeatable)")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--server", help="base URL of a running server, e.g. http://127.0.0.1:30000")
    ap.add_argument("--server-cmd", help="command that POSTs the JSON body (last argument) to /generate")
    ap.add_argument("--concurrent", action="store_true", help="send all prompts at once (batch > 1)")
    args = ap.parse_args()
    prompts = [[int(t) for t in p.split(",")] for p in args.prompt] if args.prompt else DEFAULT_PROMPTS

    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    compare = bool(args.server or args.server_cmd)
    equal_all = True
    answers: dict[int, concurrent.futures.Future] = {}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(prompts))
    if compare and args.concurrent:  # all requests in flight before the reference runs
        answers = {i: pool.submit(ask_server, args, p, args.max_new_tokens) for i, p in enumerate(prompts)}
    for i, prompt in enumerate(prompts):
        ref, gaps = reference(model, prompt, args.max_new_tokens)
        row = {"prompt": prompt, "reference": ref, "min_top2_gap": round(min(gaps), 4)}
        if compare:
            answer = answers.get(i) or pool.submit(ask_server, args, prompt, args.max_new_tokens)
            got, latency = answer.result()
            diff = next((i for i, (a, b) in enumerate(zip(ref, got, strict=False)) if a != b), None)
            if diff is None and len(ref) != len(got):
                diff = min(len(ref), len(got))
            row.update(server=got, equal=diff is None, latency_s=round(latency, 3))
            if diff is not None:
                row.update(first_diff=diff, top2_gap_there=round(gaps[diff], 4) if diff < len(gaps) else None)
                equal_all = False
        print(json.dumps(row), flush=True)
    pool.shutdown()
    if compare:
        how = " (concurrent)" if args.concurrent else ""
        print(f"reference_generate: {'EQUAL' if equal_all else 'DIFFERENT'} for {len(prompts)} prompts{how}")
    return 0 if equal_all else 1


if __name__ == "__main__":
    sys.exit(main())
