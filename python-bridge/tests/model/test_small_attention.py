"""The written-out attention used on CPU for few keys equals SDPA, values and gradients."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lego_rl.model.attention import SMALL_ATTENTION_MAX_KEYS, small_attention, use_small_attention


def _qkv(*shape: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=g, requires_grad=True) for _ in range(3))


def test_causal_attention_matches_sdpa_in_values_and_gradients() -> None:
    q, k, v = _qkv(3, 4, 9, 16, seed=0)
    ours = small_attention(q, k, v, causal=True)
    theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    out_grad = torch.randn_like(ours)
    ours_grads = torch.autograd.grad(ours, (q, k, v), out_grad)
    theirs_grads = torch.autograd.grad(theirs, (q, k, v), out_grad)
    for a, b in zip(ours_grads, theirs_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_hidden_keys_weigh_exactly_zero_as_in_sdpa() -> None:
    # A decode step: one query per head, sequences of different lengths in one padded span.
    q = _qkv(5, 2, 2, 8, seed=1)[0].detach()
    _, k, v = (t.detach() for t in _qkv(5, 2, 7, 8, seed=2))
    lengths = torch.tensor([7, 3, 1, 5, 7])
    keep = (torch.arange(7)[None, :] < lengths[:, None])[:, None, None, :]
    ours = small_attention(q, k, v, keep_xQS=keep)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=keep), rtol=0, atol=1e-6)
    # Whatever lies past a sequence's length changes nothing, bit for bit.
    hidden = ~keep[:, 0, 0, :, None].unsqueeze(1).expand(5, 2, 7, 8)
    noisy = small_attention(q, k.masked_fill(hidden, 1e4), v.masked_fill(hidden, -1e4), keep_xQS=keep)
    assert torch.equal(noisy, ours)


def test_used_only_for_fp32_on_cpu_with_few_keys() -> None:
    x = torch.zeros(1)
    assert use_small_attention(x, SMALL_ATTENTION_MAX_KEYS)
    assert not use_small_attention(x, SMALL_ATTENTION_MAX_KEYS + 1)
    assert not use_small_attention(x.bfloat16(), 8)
