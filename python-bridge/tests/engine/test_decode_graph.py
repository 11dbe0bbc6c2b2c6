"""The compiled decode graph gives what the eager engine gives: tokens, logprobs, routing, under joins, finishes and weight updates."""

import dataclasses

import pytest
import torch
import torch._dynamo

from lego_rl.engine import Engine, EngineConfig, GenerationRequest, GenerationResult, SamplingParams
from lego_rl.engine.decode_graph import DecodeGraph
from lego_rl.model import MoeForCausalLM, init_weights, load_model
from lego_rl.model.tiny import BYTE_TOKENS, tiny_config

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
    engine, graph = Engine(byte_model), DecodeGraph(byte_model)
    pool = engine._kv
    a, b, c = pool.open(), pool.open(), pool.open()
    for cache in (a, b, c):
        cache.length = 5
    assert graph.fits([a, b, c]) and graph.fits([a, b])
    assert not graph.fits([b, a, c]) and not graph.fits([a, c])
    a.length = b.length = 1
    assert not graph.fits([a, b])  # one cached position: a size the symbolic graph specializes on
    a.length = 5
    assert not graph.fits([a])
    graph.disabled = "for the test"
    assert not graph.fits([a, b, c])


def test_pool_growth_and_other_batch_sizes_compile_nothing_new(byte_model: MoeForCausalLM):
    engine = Engine(byte_model, COMPILED)
    # The graph has two variants, compiled once per process: every slot of the pool decoding (16 requests in 16
    # slots), and fewer (13 in 16).
    full = [GenerationRequest(request_id=f"f{i}", prompt_token_ids=prompt(i), sampling=SamplingParams(temperature=0, max_tokens=4))
            for i in range(16)]
    engine.generate(full)
    engine.generate(requests())
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    many = [GenerationRequest(request_id=f"m{i}", prompt_token_ids=prompt(i % 7, 30 + i), sampling=SamplingParams(temperature=0, max_tokens=5))
            for i in range(70)]
    long = [GenerationRequest(request_id=f"l{i}", prompt_token_ids=prompt(i, 600), sampling=SamplingParams(temperature=0, max_tokens=5))
            for i in range(3)]
    steps = engine._decode_graph.steps
    assert_same(engine.generate(many + long), Engine(byte_model).generate(many + long))
    assert engine._kv.slots == 64 and engine._kv.capacity > 512  # grown from 16 slots and 512 positions
    assert engine._decode_graph.steps > steps
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == before


def test_past_dynamos_recompile_limit_the_engine_decodes_eagerly_and_says_why():
    # A model shape no other test compiles, so its first decode step must compile; a limit of 0 refuses that.
    model = MoeForCausalLM(dataclasses.replace(tiny_config(BYTE_TOKENS), num_attention_heads=8, head_dim=16))
    init_weights(model, seed=1)
    engine = Engine(model.eval(), COMPILED)
    with torch._dynamo.config.patch(recompile_limit=0), pytest.warns(RuntimeWarning, match="recompile limit"):
        got = engine.generate(requests())
    graph = engine._decode_graph
    assert graph is not None and graph.steps == 0 and graph.disabled is not None and "decoding eagerly" in graph.disabled
    assert_same(got, Engine(model).generate(requests()))


def test_warm_up_compiles_ahead_and_leaves_no_trace_but_the_graph(byte_model: MoeForCausalLM):
    engine = Engine(byte_model, COMPILED)
    stats = dict(engine.stats)
    engine.warm_up()
    assert engine._decode_graph is not None and engine._decode_graph.steps >= 2
    assert engine.stats == stats and not engine.has_work and engine.num_running == 0
    assert_same(engine.generate(requests()), Engine(byte_model).generate(requests()))
    engine.submit(requests()[0])
    with pytest.raises(RuntimeError, match="before any request"):
        engine.warm_up()
    eager = Engine(byte_model)
    eager.warm_up()  # nothing to compile: no request runs
    assert eager.stats == stats


@pytest.mark.parametrize("bad", ["yes", 1])
def test_compile_decode_must_be_a_bool(bad):
    with pytest.raises(ValueError, match="compile_decode must be True or False"):
        EngineConfig(compile_decode=bad)
