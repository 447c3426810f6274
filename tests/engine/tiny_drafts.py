"""The tiny speculative-decoding drafts of the test hosts' model, made locally and deterministically.

Part of the recipe of `make_tiny_model.py` (which imports this file and hashes it into the cache key):
after the target is saved, `add_nextn_layer()` appends the target's own NEXTN (MTP) layer to its weights
and `build_drafts()` writes the drafts under `<model>/drafts/`, all on the target's tokenizer (vocab 512,
hidden 64). Facts behind every shape: /work/shared/reference/sglang-cpu-speculative.md.

- the target itself (`<model>`): `model.layers.2.*`, its NEXTN layer (`num_nextn_predict_layers: 1` is
  already in the config; SGLang's `model_config.py` makes it `DeepseekV3ForCausalLMNextN`); served with
  `--speculative-algorithm NEXTN` and the target as the draft path;
- `drafts/eagle3`: `LlamaForCausalLMEagle3`, 1 layer, on the aux hidden states of target layers 0 and 1;
- `drafts/dflash`: `DFlashDraftModel` (qwen3), 1 layer, block 4, on target layer 0;
- `drafts/accept-target`: the target with every embedding row equal, so its greedy token is one constant;
- `drafts/accept-eagle3`: an EAGLE3 head with `draft_vocab_size 1` whose `d2t` maps to that constant
  token: on `accept-target` every draft is accepted (the accept path).

Random weights from one torch.Generator per tensor name (seeded from SEED and the name), so a tensor's
bytes do not depend on the order in which others are made. SGLang's draft loaders skip names they do not
know and leave such parameters uninitialised, so every parameter of each draft is written here.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

SEED = 20240602
HIDDEN = 64
STD = 0.2  # the target's initializer_range
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _randn(name: str, shape: tuple[int, ...]):
    import torch

    seed = int.from_bytes(hashlib.sha256(f"{SEED}:{name}".encode()).digest()[:8], "little")
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * STD).contiguous()


def _ones(shape: tuple[int, ...]):
    import torch

    return torch.ones(shape, dtype=torch.float32)


def _save(out: Path, tensors: dict, config: dict, target: Path) -> None:
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    save_file(dict(sorted(tensors.items())), str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for name in TOKENIZER_FILES:
        if (target / name).is_file():
            shutil.copyfile(target / name, out / name)


def nextn_tensors(target_config: dict) -> dict:
    """`model.layers.<L>.*` for L = num_hidden_layers: enorm, hnorm, eh_proj, shared_head.norm, the
    MLA attention as the target's layers have it, and a MoE MLP (the NextN layer is always sparse)."""
    c = target_config
    p = f"model.layers.{c['num_hidden_layers']}."
    h, heads = c["hidden_size"], c["num_attention_heads"]
    qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
    lora, rope, v = c["kv_lora_rank"], c["qk_rope_head_dim"], c["v_head_dim"]
    moe, experts = c["moe_intermediate_size"], c["n_routed_experts"]
    shared = moe * c["n_shared_experts"]
    t = {
        "enorm.weight": _ones((h,)),
        "hnorm.weight": _ones((h,)),
        "eh_proj.weight": _randn(p + "eh_proj", (h, 2 * h)),
        "shared_head.norm.weight": _ones((h,)),
        "input_layernorm.weight": _ones((h,)),
        "post_attention_layernorm.weight": _ones((h,)),
        "self_attn.q_proj.weight": _randn(p + "q_proj", (heads * qk, h)),
        "self_attn.kv_a_proj_with_mqa.weight": _randn(p + "kv_a", (lora + rope, h)),
        "self_attn.kv_a_layernorm.weight": _ones((lora,)),
        "self_attn.kv_b_proj.weight": _randn(p + "kv_b", (heads * (c["qk_nope_head_dim"] + v), lora)),
        "self_attn.o_proj.weight": _randn(p + "o_proj", (h, heads * v)),
        "mlp.gate.weight": _randn(p + "gate", (experts, h)),
        "mlp.gate.e_score_correction_bias": _ones((experts,)) * 0.0,
        "mlp.shared_experts.gate_proj.weight": _randn(p + "sh.gate", (shared, h)),
        "mlp.shared_experts.up_proj.weight": _randn(p + "sh.up", (shared, h)),
        "mlp.shared_experts.down_proj.weight": _randn(p + "sh.down", (h, shared)),
    }
    for e in range(experts):
        t[f"mlp.experts.{e}.gate_proj.weight"] = _randn(f"{p}e{e}.gate", (moe, h))
        t[f"mlp.experts.{e}.up_proj.weight"] = _randn(f"{p}e{e}.up", (moe, h))
        t[f"mlp.experts.{e}.down_proj.weight"] = _randn(f"{p}e{e}.down", (h, moe))
    return {p + k: val for k, val in t.items()}


def add_nextn_layer(target: Path) -> None:
    """Append the NEXTN layer to the target's model.safetensors (layers 0 and 1 stay byte for byte)."""
    from safetensors.torch import load_file, save_file

    config = json.loads((target / "config.json").read_text())
    if config.get("num_nextn_predict_layers") != 1:
        raise SystemExit(
            f"target config has num_nextn_predict_layers {config.get('num_nextn_predict_layers')}, want 1"
        )
    weights = load_file(str(target / "model.safetensors"))
    weights.update(nextn_tensors(config))
    save_file(dict(sorted(weights.items())), str(target / "model.safetensors"), metadata={"format": "pt"})


def _llama_draft_config(target_config: dict, **extra) -> dict:
    c = target_config
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "target_hidden_size": c["hidden_size"],
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 16,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "vocab_size": c["vocab_size"],
        "draft_vocab_size": c["vocab_size"],
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": c["bos_token_id"],
        "eos_token_id": c["eos_token_id"],
        "pad_token_id": c["pad_token_id"],
        # a 2-layer DeepSeek target can capture only layers 0 and 1
        # (deepseek_v2.py set_eagle3_layers_to_capture)
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 1], "use_aux_hidden_state": True},
        **extra,
    }


def eagle3_tensors(tag: str, draft_vocab: int) -> dict:
    h = HIDDEN
    p = f"{tag}."
    return {
        "fc.weight": _randn(p + "fc", (h, 2 * h)),
        "midlayer.input_layernorm.weight": _ones((h,)),
        "midlayer.hidden_norm.weight": _ones((h,)),
        "midlayer.post_attention_layernorm.weight": _ones((h,)),
        "midlayer.self_attn.q_proj.weight": _randn(p + "q", (h, 2 * h)),
        "midlayer.self_attn.k_proj.weight": _randn(p + "k", (h, 2 * h)),
        "midlayer.self_attn.v_proj.weight": _randn(p + "v", (h, 2 * h)),
        "midlayer.self_attn.o_proj.weight": _randn(p + "o", (h, h)),
        "midlayer.mlp.gate_proj.weight": _randn(p + "gate", (128, h)),
        "midlayer.mlp.up_proj.weight": _randn(p + "up", (128, h)),
        "midlayer.mlp.down_proj.weight": _randn(p + "down", (h, 128)),
        "norm.weight": _ones((h,)),
        "lm_head.weight": _randn(p + "lm_head", (draft_vocab, h)),
    }


def dflash(out: Path, target: Path, target_config: dict) -> None:
    h = HIDDEN
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": h,  # must equal the target's
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 16,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "vocab_size": target_config["vocab_size"],
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "block_size": 4,
        "num_target_layers": target_config["num_hidden_layers"],
        # set_dflash_layers_to_capture captures id + 1: on a 2-layer target only id 0 can be captured
        "dflash_config": {"target_layer_ids": [0], "mask_token": "<pad>", "mask_token_id": 2},
    }
    p = "dflash."
    tensors = {
        "fc.weight": _randn(p + "fc", (h, h * 1)),
        "hidden_norm.weight": _ones((h,)),
        "norm.weight": _ones((h,)),
        "layers.0.input_layernorm.weight": _ones((h,)),
        "layers.0.post_attention_layernorm.weight": _ones((h,)),
        "layers.0.self_attn.q_proj.weight": _randn(p + "q", (64, h)),
        "layers.0.self_attn.k_proj.weight": _randn(p + "k", (64, h)),
        "layers.0.self_attn.v_proj.weight": _randn(p + "v", (64, h)),
        "layers.0.self_attn.o_proj.weight": _randn(p + "o", (h, 64)),
        "layers.0.self_attn.q_norm.weight": _ones((16,)),
        "layers.0.self_attn.k_norm.weight": _ones((16,)),
        "layers.0.mlp.gate_proj.weight": _randn(p + "gate", (128, h)),
        "layers.0.mlp.up_proj.weight": _randn(p + "up", (128, h)),
        "layers.0.mlp.down_proj.weight": _randn(p + "down", (h, 128)),
    }
    _save(out, tensors, config, target)


def constant_greedy_token(model_dir: Path) -> int:
    """The one token the accept target predicts (every position sees the same values)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        tokens = {
            int(model(torch.tensor([p])).logits[0, -1].argmax()) for p in ([3, 40, 50], [100, 7], [9] * 9)
        }
    if len(tokens) != 1:
        raise SystemExit(f"accept target predicts {sorted(tokens)}, want one constant token")
    return tokens.pop()


def accept_pair(drafts: Path, target: Path, target_config: dict) -> None:
    import torch
    from safetensors.torch import load_file

    acc_target = drafts / "accept-target"
    weights = load_file(str(target / "model.safetensors"))
    weights = {
        k: v
        for k, v in weights.items()
        if not k.startswith(f"model.layers.{target_config['num_hidden_layers']}.")
    }
    embed = weights["model.embed_tokens.weight"]
    weights["model.embed_tokens.weight"] = embed[:1].expand_as(embed).contiguous()
    config = {**target_config, "num_nextn_predict_layers": 0}
    _save(acc_target, weights, config, target)
    for name in ("generation_config.json",):
        if (target / name).is_file():
            shutil.copyfile(target / name, acc_target / name)
    token = constant_greedy_token(acc_target)
    tensors = eagle3_tensors("accept-eagle3", 1)
    tensors["d2t"] = torch.tensor([token], dtype=torch.int64)  # draft id 0 -> target id (stored as a diff)
    config = _llama_draft_config(target_config, draft_vocab_size=1, kdtree_constant_token=token)
    _save(drafts / "accept-eagle3", tensors, config, target)


def build_drafts(target: Path) -> None:
    target_config = json.loads((target / "config.json").read_text())
    drafts = target / "drafts"
    _save(
        drafts / "eagle3",
        eagle3_tensors("eagle3", target_config["vocab_size"]),
        _llama_draft_config(target_config),
        target,
    )
    dflash(drafts / "dflash", target, target_config)
    accept_pair(drafts, target, target_config)
