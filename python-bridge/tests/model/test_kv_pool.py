"""A shared KV pool: batched decode equals decoding alone; closing a slot keeps the others intact."""

from __future__ import annotations

import torch

from lego_rl.model import Config, KVCache, KVPool, MoeForCausalLM, init_weights
from lego_rl.model.moe import all_experts_swiglu, dispatch, grouped_swiglu, looped_swiglu, padded_swiglu, prefers_all_experts

CONFIG = Config(
    vocab_size=97, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2,
    max_position_embeddings=256,
)


def _model() -> MoeForCausalLM:
    model = MoeForCausalLM(CONFIG)
    init_weights(model, seed=3)
    return model.eval()


def _prompts() -> list[torch.Tensor]:
    return [torch.arange(n) * (7 + n) % CONFIG.vocab_size for n in (5, 9, 2, 13)]


@torch.no_grad()
def _decode_alone(model: MoeForCausalLM, prompt: torch.Tensor, steps: int) -> list[torch.Tensor]:
    cache = KVCache.alone(CONFIG, 4, dtype=torch.float32)
    logits = [model(prompt, caches=[cache]).logits[-1]]
    for _ in range(steps):
        logits.append(model(logits[-1].argmax()[None], caches=[cache]).logits[-1])
    return logits


@torch.no_grad()
def test_sequences_of_different_lengths_decode_together_as_they_would_alone():
    model, prompts = _model(), _prompts()
    pool = KVPool(CONFIG, capacity=4, slots=1, dtype=torch.float32)  # both axes must grow
    caches = [pool.open() for _ in prompts]
    out = model(torch.cat(prompts), seq_lens=[len(p) for p in prompts], caches=caches,
                logits_rows=torch.tensor([len(p) for p in prompts]).cumsum(0) - 1).logits
    together = [[row] for row in out]
    for _ in range(6):
        nxt = torch.stack([steps[-1].argmax() for steps in together])
        for steps, row in zip(together, model(nxt, seq_lens=[1] * len(prompts), caches=caches).logits):
            steps.append(row)
    assert pool.slots >= 4 and pool.capacity >= 19
    for prompt, steps in zip(prompts, together):
        alone = _decode_alone(model, prompt, 6)
        assert max((a - b).abs().max().item() for a, b in zip(alone, steps)) < 1e-5


@torch.no_grad()
def test_closing_a_slot_moves_the_last_sequence_without_changing_its_future():
    model, prompts = _model(), _prompts()
    pool = KVPool(CONFIG, capacity=32, slots=4, dtype=torch.float32)
    caches = [pool.open() for _ in prompts]
    out = model(torch.cat(prompts), seq_lens=[len(p) for p in prompts], caches=caches,
                logits_rows=torch.tensor([len(p) for p in prompts]).cumsum(0) - 1).logits
    last = caches[-1]
    pool.close(caches[0])
    assert last.slot == 0 and caches[0].pool is None
    # The moved sequence keeps decoding, alone in the batch and with its old neighbours.
    kept = caches[1:]
    rows = model(torch.stack([out[i].argmax() for i in (1, 2, 3)]), seq_lens=[1, 1, 1], caches=kept).logits
    alone = _decode_alone(model, prompts[3], 1)
    assert (rows[2] - alone[1]).abs().max().item() < 1e-5
    reopened = pool.open()
    assert reopened.slot == 3 and reopened.length == 0


def test_a_closed_cache_refuses_use_with_a_clear_error():
    pool = KVPool(CONFIG, capacity=4, dtype=torch.float32)
    cache = pool.open()
    pool.close(cache)
    try:
        cache.reserve(8)
    except ValueError as error:
        assert "closed" in str(error)
    else:
        raise AssertionError("a closed cache accepted reserve()")


def test_all_experts_path_equals_the_grouped_path_and_is_chosen_only_for_few_tokens():
    gen = torch.Generator().manual_seed(0)
    E, F_, D, K, T = 8, 16, 32, 2, 6
    gate_up, down = 0.1 * torch.randn(E, 2 * F_, D, generator=gen), 0.1 * torch.randn(E, D, F_, generator=gen)
    x_TD = torch.randn(T, D, generator=gen)
    idx_TK = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)])
    w_TK = torch.rand(T, K, generator=gen)
    order_N, token_N, counts = dispatch(idx_TK, E)
    grouped_TD = torch.zeros_like(x_TD).index_add_(
        0, token_N, grouped_swiglu(x_TD[token_N], counts, gate_up, down) * w_TK.reshape(-1)[order_N, None]
    )
    assert torch.allclose(all_experts_swiglu(x_TD, idx_TK, w_TK, gate_up, down), grouped_TD, rtol=1e-5, atol=1e-6)
    assert prefers_all_experts(16, 8, 2, 128, 128) and not prefers_all_experts(64, 8, 2, 128, 128)
    assert not prefers_all_experts(1, 128, 8, 768, 2048)  # a Qwen3-30B-shaped layer always groups


def test_padded_experts_equal_one_gemm_per_expert_with_gradients():
    gen = torch.Generator().manual_seed(1)
    E, F_, D = 4, 8, 16
    gate_up = (0.1 * torch.randn(E, 2 * F_, D, generator=gen)).requires_grad_()
    down = (0.1 * torch.randn(E, D, F_, generator=gen)).requires_grad_()
    counts = [3, 0, 5, 1]  # an expert with no rows, uneven groups
    x_ND = torch.randn(sum(counts), D, generator=gen, requires_grad=True)
    looped, padded = looped_swiglu(x_ND, counts, gate_up, down), padded_swiglu(x_ND, counts, gate_up, down)
    assert torch.allclose(padded, looped, rtol=1e-5, atol=1e-6)
    grads = [torch.autograd.grad(y.square().sum(), (x_ND, gate_up, down)) for y in (looped, padded)]
    for a, b in zip(*grads):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def test_grouped_gemm_experts_equal_one_gemm_per_expert_bit_for_bit_with_gradients():
    from lego_rl.model.moe import grouped_mm_swiglu, has_grouped_mm

    assert has_grouped_mm(torch.device("cpu"), torch.float32)  # torch >= 2.8 on CPU
    gen = torch.Generator().manual_seed(3)
    E, F_, D = 4, 8, 16
    gate_up = (0.1 * torch.randn(E, 2 * F_, D, generator=gen)).requires_grad_()
    down = (0.1 * torch.randn(E, D, F_, generator=gen)).requires_grad_()
    for counts in ([3, 0, 5, 1], [0, 0, 0, 6], [40, 33, 0, 27]):  # empty experts, first and last
        x_ND = torch.randn(sum(counts), D, generator=gen, requires_grad=True)
        looped, grouped = looped_swiglu(x_ND, counts, gate_up, down), grouped_mm_swiglu(x_ND, counts, gate_up, down)
        assert torch.equal(grouped, looped)
        grads = [torch.autograd.grad(y.square().sum(), (x_ND, gate_up, down)) for y in (looped, grouped)]
        for a, b in zip(*grads):
            assert torch.equal(a, b)


def test_sorted_experts_move_rows_by_permutation_with_the_scatter_add_results_bit_for_bit():
    from lego_rl.model.moe import grouped_swiglu, sorted_swiglu

    gen = torch.Generator().manual_seed(4)
    E, F_, D, T, K = 8, 16, 32, 300, 2
    gate_up = (0.1 * torch.randn(E, 2 * F_, D, generator=gen)).requires_grad_()
    down = (0.1 * torch.randn(E, D, F_, generator=gen)).requires_grad_()
    x_TD = torch.randn(T, D, generator=gen, requires_grad=True)
    idx_TK = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)])  # top-k order, not id order
    w_TK = torch.rand(T, K, generator=gen, requires_grad=True)
    order_N, token_N, counts = dispatch(idx_TK.sort(dim=1).values, E)
    w_sorted = w_TK.gather(1, idx_TK.sort(dim=1).indices)
    scattered = torch.zeros(T, D).index_add_(
        0, token_N, grouped_swiglu(x_TD[token_N], counts, gate_up, down) * w_sorted.reshape(-1)[order_N, None]
    )
    permuted = sorted_swiglu(x_TD, idx_TK, w_TK, gate_up, down)
    assert torch.equal(permuted, scattered)
    grads = [torch.autograd.grad(y.square().sum(), (x_TD, w_TK, gate_up, down)) for y in (scattered, permuted)]
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_slotted_experts_equal_the_sorted_grouping_bit_for_bit_with_gradients():
    from lego_rl.model.moe import slotted_swiglu

    gen = torch.Generator().manual_seed(2)
    E, F_, D = 8, 16, 32
    gate_up = (0.1 * torch.randn(E, 2 * F_, D, generator=gen)).requires_grad_()
    down = (0.1 * torch.randn(E, D, F_, generator=gen)).requires_grad_()
    for T, K in ((32, 2), (20, 4)):  # K = 4: the per-token sum must still run in expert-id order
        x_TD = torch.randn(T, D, generator=gen, requires_grad=True)
        idx_TK = torch.stack([torch.randperm(E, generator=gen)[:K] for _ in range(T)])
        w_TK = torch.rand(T, K, generator=gen)
        order_N, token_N, counts = dispatch(idx_TK, E)
        sorted_TD = torch.zeros(T, D).index_add_(
            0, token_N, padded_swiglu(x_TD[token_N], counts, gate_up, down) * w_TK.reshape(-1)[order_N, None]
        )
        slotted_TD = slotted_swiglu(x_TD, idx_TK, w_TK, gate_up, down)
        assert slotted_TD is not None and torch.equal(slotted_TD, sorted_TD)
        grads = [torch.autograd.grad(y.square().sum(), (x_TD, gate_up, down)) for y in (sorted_TD, slotted_TD)]
        for a, b in zip(*grads):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    busy = torch.zeros(4096, 2, dtype=torch.int64)  # every copy on one expert: padding would not pay
    assert slotted_swiglu(torch.zeros(4096, D), busy, torch.ones(4096, 2), gate_up, down) is None
