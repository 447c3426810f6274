"""Make the test hosts' tiny DeepSeek-V3-style MLA model and its tokenizer, locally and deterministically.

Run with the engine venv's python (torch + transformers + tokenizers):
    .cache/engine-venv/bin/python tests/engine/make_tiny_model.py [--cache DIR] [--out DIR] [--force]

The model lands in <cache>/<key>/ (cache default: the machine-level cache's engine-model/,
scripts/devcache.py; make engine-model links .cache/engine-model/current to it), where <key> is the
first 16 hex digits of the sha256 of THIS file and tiny_drafts.py: the two files are the recipe, change
one and a new model is made; an existing complete directory is reused (nothing is written). The path is
printed on stdout (the only stdout line).
--out DIR writes to DIR instead of the cache (used to check that two builds give identical files).

What it is (the config seen serving with the real sglang 0.5.23 on a CPU, see
/work/shared/reference/sglang-cpu-engine.md): DeepseekV3ForCausalLM with hidden 64, 2 layers, both
dense (first_k_dense_replace=2), 4 heads, q_lora_rank None, kv_lora_rank 512, qk_rope_head_dim 64,
qk_nope_head_dim 128, v_head_dim 128, 4 routed experts (unused), yarn rope (SGLang's CPU rotary factory
asserts a rope scaling is present). TARGET_VERIFY then runs absorbed MLA with head dims 576/512 and one
KV head: the shapes the kdtree kernel serves. Float32 weights (the server runs --dtype float32).
The target's own NEXTN layer and the speculative drafts (EAGLE3, DFLASH, the always-agree pair) under
<key>/drafts/ come from tiny_drafts.py (its docstring lists them).
Tokenizer: byte-level BPE with 512 tokens trained with `tokenizers` on the fixed text below (no hub).
Weights come from torch.manual_seed(SEED) and transformers' initialisation: random, but the same bytes
on every build.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

SEED = 20240601
VOCAB = 512
SPECIAL = ["<s>", "</s>", "<pad>"]  # ids 0, 1, 2
ROOT = Path(__file__).resolve().parents[2]
DRAFTS_RECIPE = Path(__file__).resolve().with_name("tiny_drafts.py")
sys.path.insert(0, str(ROOT / "scripts"))
import devcache  # noqa: E402 the machine-level cache's home has one owner

# The training text: fixed, ASCII, repetitive enough that NGRAM speculation finds matches.
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A tree of draft tokens is verified in one pass of the target model.",
    "Speculative decoding proposes tokens cheaply and verifies them exactly.",
    "The key value cache holds the latent vectors of every committed token.",
    "Multi-head latent attention compresses keys and values into one latent head.",
    "Once upon a time there was a small model that answered every question the same way.",
    "one two three four five six seven eight nine ten eleven twelve",
    "red green blue yellow black white orange purple brown grey",
    "Monday Tuesday Wednesday Thursday Friday Saturday Sunday",
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i)\n",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
]


def recipe_key() -> str:
    """This file and the drafts' recipe (tiny_drafts.py) together."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(DRAFTS_RECIPE.read_bytes())
    return digest.hexdigest()[:16]


def build_tokenizer(out: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    if tok.get_vocab_size() != VOCAB:
        raise SystemExit(f"tokenizer has {tok.get_vocab_size()} tokens, want {VOCAB}")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", model_max_length=4096
    )
    fast.save_pretrained(out)
    return fast


def build_model(out: Path, tokenizer) -> None:
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(SEED)
    config = DeepseekV3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        first_k_dense_replace=2,
        moe_layer_freq=1,  # read by SGLang's DeepseekV2DecoderLayer, not a DeepseekV3Config default
        topk_method="noaux_tc",
        scoring_func="sigmoid",
        num_attention_heads=4,
        num_key_value_heads=4,
        n_shared_experts=1,
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        q_lora_rank=None,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
        max_position_embeddings=4096,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 1024,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        # A larger init than the default 0.02 so that logits differ clearly between tokens (greedy
        # comparisons are then not decided by float rounding).
        initializer_range=0.2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = DeepseekV3ForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(out, safe_serialization=True)


def build(out: Path) -> None:
    tokenizer = build_tokenizer(out)
    build_model(out, tokenizer)
    sys.path.insert(0, str(DRAFTS_RECIPE.parent))
    import tiny_drafts

    tiny_drafts.add_nextn_layer(out)
    tiny_drafts.build_drafts(out)
    (out / "kdtree-recipe.json").write_text(json.dumps({"recipe": recipe_key(), "seed": SEED}) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=devcache.home() / "engine-model")
    ap.add_argument("--out", type=Path, help="write here instead of <cache>/<key> (no caching)")
    ap.add_argument("--force", action="store_true", help="rebuild even when the cached model exists")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        build(args.out)
        print(args.out)
        return 0

    final = args.cache / recipe_key()
    if (final / "kdtree-recipe.json").is_file() and not args.force:
        (args.cache / devcache.LINKED).touch()  # prune's clock: this model is still used
        print(f"make_tiny_model: reusing {final}", file=sys.stderr)
        print(final)
        return 0
    args.cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=args.cache))
    try:
        build(tmp)
        tmp.chmod(0o755)  # mkdtemp makes 0700; a host's service user may not be root
        for f in tmp.rglob("*"):
            f.chmod(0o755 if f.is_dir() else 0o644)  # save_pretrained writes the safetensors file 0600
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"make_tiny_model: built {final}", file=sys.stderr)
    print(final)
    return 0


if __name__ == "__main__":
    sys.exit(main())
