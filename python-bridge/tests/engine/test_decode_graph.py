"""The compiled decode graph gives what the eager engine gives: tokens, logprobs, routing, under joins, finishes and weight updates."""

import pytest
import torch

from lego_rl.engine import Engine, EngineConfig, GenerationRequest, GenerationResult, SamplingParams
from lego_rl.engine.decode_graph import DecodeGraph
from lego_rl.model import MoeForCausalLM, load_model

COMPILED = EngineConfig(compile_decode=True)


def prompt(i: int, n: int = 12) -> tuple[int, ...]:
    return tuple((13 * i + 7 * j) % 256 for j in range(n + 3 * i))


def requests() -> list[GenerationRequest]:
    """Greedy and seeded requests of different lengths that finish at different steps, one past 128 keys."""
    out = [
        GenerationRequest(request_id=f"g{i}", prompt_token_ids=prompt(i), sampling=SamplingParams(temperature=0, max_tokens=6 + 3 * i))
        for i in range(6)
    ]
    out += [
        GenerationRequest(request_id=f"s{i}", prompt_token_ids=prompt(i, 20), sampling=SamplingParams(temperature=1.0, max_tokens=20, seed=i))
        for i in range(6)
    ]
    out.append(GenerationRequest(request_id="long", prompt_token_ids=prompt(9, 150), sampling=SamplingParams(temperature=0, max_tokens=16)))
    return out


def assert_same(got: dict[str, GenerationResult], want: dict[str, GenerationResult]) -> None:
    assert got.keys() == want.keys()
    for rid, w in want.items():
        g = got[rid]
        assert g.completion_token_ids == w.completion_token_ids, rid
        assert (g.logprobs - w.logprobs).abs().max().item() < 1e-5, rid
        assert torch.equal(g.completion_routing, w.completion_routing), rid
        assert torch.equal(g.prompt_routing, w.prompt_routing), rid
        assert g.finish_reason == w.finish_reason


def test_compiled_decode_steps_give_the_eager_engines_tokens_logprobs_and_routing(byte_model: MoeForCausalLM):
    compiled = Engine(byte_model, COMPILED)
    got = compiled.generate(requests())
    assert_same(got, Engine(byte_model).generate(requests()))
    # The steps after the long prompt's second chunk decode every running request (18 here); the last lone request's run eagerly.
    assert compiled._decode_graph is not None and compiled._decode_graph.steps >= 15


def test_requests_joining_mid_generation_run_eagerly_and_the_rest_compiled(byte_model: MoeForCausalLM):
    def run(engine: Engine) -> tuple[dict[str, GenerationResult], list[list[tuple[str, int]]]]:
        first, later = requests()[:6], requests()[6:]
        for r in first:
            engine.submit(r)
        events, results = [], {}
        for step in range(200):
            if step == 4:
                for r in later:
                    engine.submit(r)
            if not engine.has_work:
                break
            out = engine.step()
            events.append([(e.request_id, e.token_id) for e in out if not isinstance(e, GenerationResult)])
            results |= {e.request_id: e for e in out if isinstance(e, GenerationResult)}
        return results, events

    compiled = Engine(byte_model, COMPILED)
    got, got_events = run(compiled)
    want, want_events = run(Engine(byte_model))
    assert got_events == want_events
    assert_same(got, want)
    graph = compiled._decode_graph
    assert graph is not None and 0 < graph.steps < len(got_events)


def test_a_weight_update_reaches_the_compiled_graph(byte_model_dir):
    def updated() -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(3)
        return {k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in load_model(byte_model_dir).state_dict().items()}

    compiled, eager = Engine(load_model(byte_model_dir), COMPILED), Engine(load_model(byte_model_dir))
    before = compiled.generate(requests())
    assert_same(before, eager.generate(requests()))
    compiled.update_weights(updated(), 1)
    eager.update_weights(updated(), 1)
    after = compiled.generate(requests())
    assert_same(after, eager.generate(requests()))
    assert after["g5"].completion_token_ids != before["g5"].completion_token_ids


def test_only_every_open_sequence_of_one_pool_in_slot_order_fits(byte_model: MoeForCausalLM):
    engine = Engine(byte_model)
    pool = engine._kv
    a, b, c = pool.open(), pool.open(), pool.open()
    for cache in (a, b, c):
        cache.length = 5
    assert DecodeGraph.fits([a, b, c]) and DecodeGraph.fits([a, b])
    assert not DecodeGraph.fits([b, a, c]) and not DecodeGraph.fits([a, c])
    pool.close(c)
    a.length = b.length = 1
    assert not DecodeGraph.fits([a, b])  # one cached position: a size the symbolic graph specializes on
    pool.close(b)
    a.length = 5
    assert not DecodeGraph.fits([a])


@pytest.mark.parametrize("bad", ["yes", 1])
def test_compile_decode_must_be_a_bool(bad):
    with pytest.raises(ValueError, match="compile_decode must be True or False"):
        EngineConfig(compile_decode=bad)
