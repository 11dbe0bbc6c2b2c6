"""Routing record and replay (R3): replay reproduces a pass exactly and keeps router gradients."""

import pytest
import torch

from lego_rl.model import ROUTING_DTYPE, Config, MoeForCausalLM, RoutingShapeError, init_weights


def tiny_model(seed: int = 0) -> MoeForCausalLM:
    config = Config(
        vocab_size=97, hidden_size=48, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=12, intermediate_size=64, moe_intermediate_size=24, num_experts=6, num_experts_per_tok=2,
        norm_topk_prob=True, shared_expert_intermediate_size=32,
    )
    model = MoeForCausalLM(config)
    init_weights(model, seed=seed, std=0.1)  # larger than HF's 0.02 so routing is far from uniform
    return model


IDS_BT = torch.randint(0, 97, (2, 15), generator=torch.Generator().manual_seed(5))


def test_routing_is_recorded_per_token_layer_and_k():
    out = tiny_model()(IDS_BT, return_routing=True)
    assert out.routing.shape == (2, 15, 3, 2) and out.routing.dtype == ROUTING_DTYPE
    assert int(out.routing.min()) >= 0 and int(out.routing.max()) < 6
    assert (out.routing[..., 0] != out.routing[..., 1]).all()  # k distinct experts


@pytest.mark.parametrize("packed", [False, True])
def test_replaying_recorded_routing_reproduces_logits_exactly(packed: bool):
    model = tiny_model()
    ids = IDS_BT.reshape(-1) if packed else IDS_BT
    kwargs = {"seq_lens": [15, 15]} if packed else {}
    with torch.no_grad():
        recorded = model(ids, return_routing=True, **kwargs)
        replayed = model(ids, routing_replay=recorded.routing, return_routing=True, **kwargs)
    assert torch.equal(replayed.logits, recorded.logits)
    assert torch.equal(replayed.routing, recorded.routing)


def test_replaying_a_different_routing_changes_logits_and_is_obeyed():
    model = tiny_model()
    with torch.no_grad():
        recorded = model(IDS_BT, return_routing=True)
        shifted = (recorded.routing + 1) % 6  # every token to other experts
        replayed = model(IDS_BT, routing_replay=shifted, return_routing=True)
    assert torch.equal(replayed.routing, shifted)
    assert not torch.allclose(replayed.logits, recorded.logits, atol=1e-3)


def test_router_gets_gradients_under_replay_equal_to_live_routing():
    def router_grads(replay: torch.Tensor | None) -> list[torch.Tensor]:
        model = tiny_model()
        logits = model(IDS_BT, routing_replay=replay).logits
        torch.log_softmax(logits, -1)[..., 0].sum().backward()
        return [layer.mlp.gate.weight.grad for layer in model.model.layers]

    with torch.no_grad():
        routing = tiny_model()(IDS_BT, return_routing=True).routing
    replay_grads = router_grads(routing)
    live_grads = router_grads(None)
    for replay_g, live_g in zip(replay_grads, live_grads):
        assert replay_g is not None and replay_g.abs().sum() > 0
        assert torch.equal(replay_g, live_g)
    shifted_grads = router_grads((routing + 1) % 6)
    assert all(g.abs().sum() > 0 for g in shifted_grads)


def test_replay_of_wrong_shape_or_expert_is_refused():
    model = tiny_model()
    good = model(IDS_BT, return_routing=True).routing
    with pytest.raises(RoutingShapeError, match="routing_replay has shape"):
        model(IDS_BT, routing_replay=good[:, :, :2])
    with pytest.raises(RoutingShapeError, match="outside 0..5"):
        model(IDS_BT, routing_replay=torch.full_like(good, 6))


def test_packed_unequal_sequences_backpropagate_like_separate_ones():
    a, b = IDS_BT[0, :9], IDS_BT[1, :4]

    def embed_grad(ids: torch.Tensor, seq_lens: list[int]) -> torch.Tensor:
        model = tiny_model()
        logits = model(ids, seq_lens=seq_lens).logits
        torch.log_softmax(logits, -1)[:, 3].sum().backward()
        return model.model.embed_tokens.weight.grad

    separate = embed_grad(a, [9]) + embed_grad(b, [4])
    assert torch.allclose(embed_grad(torch.cat([a, b]), [9, 4]), separate, rtol=1e-5, atol=1e-5)
