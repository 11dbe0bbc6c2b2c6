"""Weights derived for inference (derived.py) are kept between steps and never go stale."""

from __future__ import annotations

import torch

from lego_rl.model import MoeForCausalLM, init_weights
from lego_rl.model.moe import MoeBlock
from lego_rl.model.tiny import BYTE_TOKENS, tiny_config

# The tiny config at 32 single-token rows takes the slotted expert path (a decode step of 32 sequences).
ROWS = 32


def _model() -> MoeForCausalLM:
    model = MoeForCausalLM(tiny_config(BYTE_TOKENS))
    init_weights(model, seed=5)
    return model


def _block(model: MoeForCausalLM) -> MoeBlock:
    block = model.model.layers[0].mlp
    assert isinstance(block, MoeBlock)
    return block


def test_inference_keeps_transposed_experts_until_a_weight_changes() -> None:
    model = _model().eval()
    block = _block(model)
    with torch.inference_mode():
        gate_up, down = block.slotted_weights()
        again = block.slotted_weights()
    assert gate_up is again[0] and down is again[1]  # kept, not re-derived
    assert gate_up.transpose(1, 2).is_contiguous() and down.transpose(1, 2).is_contiguous()
    assert torch.equal(gate_up, block.experts.gate_up_proj) and torch.equal(down, block.experts.down_proj)
    with torch.no_grad():
        block.experts.gate_up_proj.mul_(2.0)  # in place, as the engine's update_weights copies
    with torch.inference_mode():
        fresh, _ = block.slotted_weights()
    assert fresh is not gate_up and torch.equal(fresh, block.experts.gate_up_proj)


def test_decode_after_an_in_place_update_equals_a_fresh_computation() -> None:
    model = _model().eval()
    ids = torch.arange(ROWS) * 7 % BYTE_TOKENS.vocab_size
    with torch.inference_mode():
        before = model(ids, seq_lens=[1] * ROWS).logits
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.25)
        expected = model(ids, seq_lens=[1] * ROWS).logits  # no_grad keeps nothing: derived afresh
    with torch.inference_mode():
        after = model(ids, seq_lens=[1] * ROWS).logits
    assert not torch.equal(before, after)
    assert torch.equal(after, expected)


def test_training_gets_gradients_through_the_parameters() -> None:
    model = _model().train()
    ids = torch.arange(ROWS) * 5 % BYTE_TOKENS.vocab_size
    model(ids, seq_lens=[8] * (ROWS // 8)).logits.square().sum().backward()
    block = _block(model)
    attention = model.model.layers[0].self_attn
    for p in (block.experts.gate_up_proj, block.experts.down_proj, attention.q_proj.weight, attention.k_proj.weight,
              attention.v_proj.weight, attention.q_norm.weight):
        assert p.grad is not None and float(p.grad.abs().sum()) > 0
