"""Our model loads transformers' Qwen3-MoE checkpoints and computes the same logits and routing."""

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import Qwen2MoeConfig, Qwen3MoeConfig, Qwen3MoeForCausalLM
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

from lego_rl.model import CheckpointError, Config, KVCache, MoeForCausalLM, load_model, save_model
from lego_rl.model.moe import MoeBlock

VOCAB = 320


def hf_tiny(*, tie: bool, seed: int = 0) -> Qwen3MoeForCausalLM:
    config = Qwen3MoeConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        moe_intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        mlp_only_layers=[1],  # one dense layer: routing has L = 2
        max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=tie,
    )
    torch.manual_seed(seed)
    return Qwen3MoeForCausalLM(config).float().eval()


def hf_topk_routing(model: Qwen3MoeForCausalLM, ids: torch.Tensor) -> torch.Tensor:
    """[B*T, L, K] expert indices HF's routers chose, captured with forward hooks."""
    chosen: list[torch.Tensor] = []
    hooks = [
        layer.mlp.gate.register_forward_hook(lambda _m, _i, out: chosen.append(out[2]))
        for layer in model.model.layers
        if hasattr(layer.mlp, "gate")
    ]
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    return torch.stack(chosen, dim=1)


@pytest.mark.parametrize("tie", [False, True])
def test_per_expert_checkpoint_written_by_transformers_gives_same_logits_and_routing(tmp_path: Path, tie: bool):
    hf = hf_tiny(tie=tie)
    hf.save_pretrained(tmp_path)
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert "model.layers.0.mlp.experts.7.gate_proj.weight" in f.keys()  # transformers writes per expert
    ours = load_model(tmp_path)
    ids = torch.randint(0, VOCAB, (2, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(ids).logits
        out = ours(ids, return_routing=True)
    assert out.logits.shape == (2, 13, VOCAB)
    assert (out.logits - expected).abs().max().item() < 1e-4
    assert torch.equal(out.routing.reshape(26, 2, 2).long(), hf_topk_routing(hf, ids))


def test_fused_checkpoint_gives_same_logits(tmp_path: Path):
    hf = hf_tiny(tie=False, seed=3)
    # transformers 5 holds experts fused in memory but writes them per expert; write fused ourselves.
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}
    assert state["model.layers.0.mlp.experts.gate_up_proj"].shape == (8, 64, 64)
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(hf.config.to_json_string())
    ours = load_model(tmp_path)
    ids = torch.randint(0, VOCAB, (1, 17), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert (ours(ids).logits - hf(ids).logits).abs().max().item() < 1e-4


def test_save_then_load_round_trips_both_layouts(tmp_path: Path):
    hf = hf_tiny(tie=True)
    hf.save_pretrained(tmp_path / "hf")
    ours = load_model(tmp_path / "hf")
    ids = torch.arange(20)[None] * 7 % VOCAB
    with torch.no_grad():
        ref = ours(ids).logits
        for layout in ("fused", "per_expert"):
            save_model(ours, tmp_path / layout, expert_layout=layout)
            assert torch.equal(load_model(tmp_path / layout)(ids).logits, ref)


def test_missing_tensor_is_reported_by_name(tmp_path: Path):
    hf = hf_tiny(tie=False)
    state = {k: v.contiguous() for k, v in hf.state_dict().items() if k != "model.layers.2.self_attn.q_norm.weight"}
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(hf.config.to_json_string())
    with pytest.raises(CheckpointError, match=r"model\.layers\.2\.self_attn\.q_norm\.weight"):
        load_model(tmp_path)


def test_config_reads_hub_style_fields():
    hub = json.loads(hf_tiny(tie=False).config.to_json_string())
    hub.pop("rope_parameters")
    hub["rope_theta"] = 1e6  # Qwen hub configs keep rope_theta top-level
    config = Config.from_hf(hub)
    assert (config.num_experts, config.rope_theta, config.moe_layers) == (8, 1e6, (0, 2))
    assert Config.from_hf(config.to_hf()) == config


def test_packed_sequences_and_kv_cache_match_separate_full_forwards():
    hf = hf_tiny(tie=False)
    model = MoeForCausalLM(Config.from_hf(json.loads(hf.config.to_json_string())))
    model.load_state_dict(hf.state_dict())
    a, b = torch.arange(11) * 5 % VOCAB, torch.arange(6) * 3 % VOCAB
    with torch.no_grad():
        ref_a, ref_b = model(a[None]).logits[0], model(b[None]).logits[0]
        packed = model(torch.cat([a, b]), seq_lens=[11, 6]).logits
        assert (packed - torch.cat([ref_a, ref_b])).abs().max().item() < 1e-5
        # prefill 7 tokens, then a 3-token chunk and a 1-token step, against a cache that must grow
        cache = KVCache.alone(model.config, 2, dtype=torch.float32)
        chunks = [model(a[s:e], caches=[cache]).logits for s, e in [(0, 7), (7, 10), (10, 11)]]
        assert cache.length == 11 and cache.capacity == 14  # 2 -> 7 -> 14 (doubling)
        assert (torch.cat(chunks) - ref_a).abs().max().item() < 1e-5


def test_shared_expert_block_matches_qwen2_moe():
    hf_cfg = Qwen2MoeConfig(
        hidden_size=32, moe_intermediate_size=16, shared_expert_intermediate_size=48, num_experts=6,
        num_experts_per_tok=2, norm_topk_prob=False, vocab_size=10, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2,
    )
    torch.manual_seed(4)
    hf_block = Qwen2MoeSparseMoeBlock(hf_cfg).float()
    with torch.no_grad():
        for p in hf_block.parameters():
            p.normal_(0, 0.2)
    ours = MoeBlock(
        Config(vocab_size=10, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
               head_dim=16, intermediate_size=0, moe_intermediate_size=16, num_experts=6, num_experts_per_tok=2,
               norm_topk_prob=False, shared_expert_intermediate_size=48)
    )
    ours.load_state_dict(hf_block.state_dict())
    x = torch.randn(1, 9, 32)
    with torch.no_grad():
        y, idx = ours(x[0])
        assert (y - hf_block(x)[0]).abs().max().item() < 1e-5
    assert idx.shape == (9, 2)
