"""Prefix cache and chunked prefill: an agent's next turn computes only what is new, and gets what a cold run gets.

The byte-tokenizer tiny model, chunks of 16 tokens so short prompts span several chunks.
"A cold run" is a fresh engine (empty cache) given the same request alone.
"""

from __future__ import annotations

import pytest
import torch

from lego_rl.engine import Engine, EngineConfig, GenerationRequest, GenerationResult, SamplingParams, TokenEvent
from lego_rl.engine.prefix_cache import PrefixCache
from lego_rl.model import MoeForCausalLM, load_model

CHUNK = 16
CONFIG = EngineConfig(prefill_chunk=CHUNK, max_context=1024)
SAMPLINGS = {
    "greedy": SamplingParams(temperature=0, max_tokens=12),
    "seeded": SamplingParams(temperature=1.0, top_p=0.9, max_tokens=12, seed=5),
}


def tokens(seed: int, n: int) -> tuple[int, ...]:
    return tuple(torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist())


def turn(engine: Engine, rid: str, prompt: tuple[int, ...], sampling: SamplingParams) -> GenerationResult:
    return engine.generate([GenerationRequest(request_id=rid, prompt_token_ids=prompt, sampling=sampling)])[rid]


def cold(model: MoeForCausalLM, prompt: tuple[int, ...], sampling: SamplingParams, config: EngineConfig = CONFIG) -> GenerationResult:
    return turn(Engine(model, config), "cold", prompt, sampling)


def assert_identical(got: GenerationResult, want: GenerationResult) -> None:
    assert got.completion_token_ids == want.completion_token_ids
    assert torch.equal(got.logprobs, want.logprobs)
    assert torch.equal(got.prompt_routing, want.prompt_routing)
    assert torch.equal(got.completion_routing, want.completion_routing)
    assert got.policy_versions == want.policy_versions


@pytest.mark.parametrize("mode", list(SAMPLINGS))
def test_each_turn_reuses_the_cached_prefix_and_equals_a_cold_run_bit_for_bit(byte_model: MoeForCausalLM, mode: str):
    sampling = SAMPLINGS[mode]
    engine = Engine(byte_model, CONFIG)
    prompt = tokens(0, 70)  # system prompt + task: 4 whole chunks and a tail
    for k in range(3):
        computed_before = engine.stats["computed_prompt_tokens"]
        result = turn(engine, f"turn-{k}", prompt, sampling)
        # Whole chunks of what earlier turns prefilled are reused; their completions were decoded
        # (other passes, other keys) and are prefilled now, as part of this turn's chunks.
        reusable = 0 if k == 0 else previous_prompt_len // CHUNK * CHUNK
        assert result.cached_tokens == reusable
        assert engine.stats["computed_prompt_tokens"] - computed_before == len(prompt) - reusable
        assert_identical(result, cold(byte_model, prompt, sampling))
        previous_prompt_len = len(prompt)
        prompt = prompt + tuple(result.completion_token_ids) + tokens(100 + k, 30)  # + the tool's result
    assert engine.stats["cached_prompt_tokens"] == 64 + 112


def test_the_last_prompt_token_is_always_computed_even_when_every_chunk_is_cached(byte_model: MoeForCausalLM):
    engine = Engine(byte_model, CONFIG)
    prompt = tokens(1, 4 * CHUNK)
    first = turn(engine, "a", prompt, SAMPLINGS["greedy"])
    again = turn(engine, "b", prompt, SAMPLINGS["greedy"])
    assert first.cached_tokens == 0 and again.cached_tokens == 3 * CHUNK  # the 4th chunk holds the last token
    assert_identical(again, first)


def test_requests_sharing_a_system_prompt_compute_its_chunks_once(byte_model: MoeForCausalLM):
    system = tokens(2, 3 * CHUNK)
    prompts = [system + tokens(10 + i, 20) for i in range(4)]
    engine = Engine(byte_model, CONFIG)
    got = engine.generate([GenerationRequest(request_id=f"s{i}", prompt_token_ids=p, sampling=SAMPLINGS["greedy"]) for i, p in enumerate(prompts)])
    # Admitted together: the first computes each shared chunk, the others wait a step and copy it.
    assert engine.stats["computed_prompt_tokens"] == len(system) + 4 * 20
    assert [got[f"s{i}"].cached_tokens for i in range(4)] == [0, 48, 48, 48]
    for i, p in enumerate(prompts):
        want = cold(byte_model, p, SAMPLINGS["greedy"])
        assert got[f"s{i}"].completion_token_ids == want.completion_token_ids
        assert torch.equal(got[f"s{i}"].prompt_routing, want.prompt_routing)
        assert (got[f"s{i}"].logprobs - want.logprobs).abs().max().item() < 1e-5  # computed beside other requests


def test_copies_of_a_long_prompt_prefill_it_once_in_chunks(byte_model: MoeForCausalLM):
    prompt = tokens(3, 50)
    engine = Engine(byte_model, EngineConfig(prefill_chunk=CHUNK, prefix_cache_mib=0))  # sharing, not the cache
    copies = [GenerationRequest(request_id=f"c{i}", prompt_token_ids=prompt, sampling=SamplingParams(temperature=1.0, max_tokens=8, seed=i)) for i in range(4)]
    got = engine.generate(copies)
    assert engine.stats["computed_prompt_tokens"] == 50 and engine.stats["cached_prompt_tokens"] == 3 * 50
    for req in copies:
        alone = turn(Engine(byte_model, CONFIG), "alone", prompt, req.sampling)
        assert got[req.request_id].completion_token_ids == alone.completion_token_ids
        assert torch.equal(got[req.request_id].prompt_routing, alone.prompt_routing)
        assert (got[req.request_id].logprobs - alone.logprobs).abs().max().item() < 1e-5  # four decode rows vs one


def test_a_long_prompt_prefills_chunk_by_chunk_while_a_running_request_keeps_decoding(byte_model: MoeForCausalLM):
    engine = Engine(byte_model, CONFIG)
    short = GenerationRequest(request_id="short", prompt_token_ids=tokens(4, 5), sampling=SamplingParams(temperature=0, max_tokens=40))
    long = GenerationRequest(request_id="long", prompt_token_ids=tokens(5, 200), sampling=SamplingParams(temperature=0, max_tokens=5))
    engine.submit(short)
    for _ in range(3):
        engine.step()
    engine.submit(long)
    steps_to_first_token = 0
    while True:
        events = engine.step()
        steps_to_first_token += 1
        # Every step also decodes the running request: the long prefill never stalls it.
        assert [e.request_id for e in events if isinstance(e, TokenEvent)][:1] == ["short"]
        if any(isinstance(e, TokenEvent) and e.request_id == "long" for e in events):
            break
    assert steps_to_first_token == -(-200 // CHUNK)  # one chunk per step
    results = {}
    while engine.has_work:
        results.update({e.request_id: e for e in engine.step() if isinstance(e, GenerationResult)})
    for req in (short, long):
        alone = turn(Engine(byte_model, CONFIG), "alone", req.prompt_token_ids, req.sampling)
        assert results[req.request_id].completion_token_ids == alone.completion_token_ids
        assert (results[req.request_id].logprobs - alone.logprobs).abs().max().item() < 1e-5


def test_nothing_is_reused_across_policy_versions(byte_model_dir):
    engine = Engine.from_model_dir(byte_model_dir, CONFIG)
    prompt = tokens(6, 70)
    turn(engine, "v0", prompt, SAMPLINGS["greedy"])
    assert engine.prefix_cache is not None and engine.prefix_cache.stored_chunks == 4
    # A request admitted at v0 that is still prefilling when the weights change.
    straddler = GenerationRequest(request_id="straddles", prompt_token_ids=tokens(7, 90), sampling=SAMPLINGS["greedy"])
    engine.submit(straddler)
    engine.step()
    new = {k: v * 3.0 if k.endswith("embed_tokens.weight") else v for k, v in load_model(byte_model_dir).state_dict().items()}
    engine.update_weights(new, version=1)
    assert engine.prefix_cache.stored_chunks == 0  # emptied with the old weights
    while engine.has_work:
        engine.step()
    assert engine.prefix_cache.stored_chunks == 0  # its later chunks mix versions: none is stored

    after = turn(engine, "v1", prompt, SAMPLINGS["greedy"])
    assert after.cached_tokens == 0 and after.policy_versions == [1] * 12
    v1 = Engine.from_model_dir(byte_model_dir, CONFIG, policy_version=0)
    v1.update_weights(new, version=1)
    assert_identical(after, turn(v1, "cold", prompt, SAMPLINGS["greedy"]))
    assert engine.prefix_cache.stored_chunks == 4  # v1's own chunks are cached from now on


def test_the_cache_stays_within_its_memory_bound_under_churn_and_keeps_serving_hits(byte_model: MoeForCausalLM):
    per_chunk = PrefixCache.bytes_per_chunk(byte_model.config, CHUNK, torch.float32)
    config = EngineConfig(prefill_chunk=CHUNK, max_context=1024, prefix_cache_mib=6 * per_chunk / 2**20)  # six chunks
    engine = Engine(byte_model, config)
    cache = engine.prefix_cache
    assert cache is not None and cache.max_chunks == 6
    system = tokens(8, CHUNK)  # every session's first chunk
    sessions = {f"s{i}": system + tokens(20 + i, 40) for i in range(12)}
    for k in range(2):
        for sid, prompt in list(sessions.items()):
            engine.submit(GenerationRequest(request_id=f"{sid}-{k}", prompt_token_ids=prompt, sampling=SamplingParams(temperature=0, max_tokens=6)))
            results = {}
            while engine.has_work:
                results.update({e.request_id: e for e in engine.step() if isinstance(e, GenerationResult)})
                assert cache.stored_chunks <= 6 and cache.allocated_bytes <= 6 * per_chunk
            result = results[f"{sid}-{k}"]
            # The shared first chunk is the most used and never goes; a session's own chunks are
            # gone by its second turn (eleven sessions came between).
            assert result.cached_tokens == (0 if (k, sid) == (0, "s0") else CHUNK)
            assert result.completion_token_ids == cold(byte_model, prompt, result_sampling(result)).completion_token_ids
            sessions[sid] = prompt + tuple(result.completion_token_ids) + tokens(50 + k, 10)
    assert cache.evictions > 0 and cache.stored_chunks == 6
    # The most recent session's chain is whole: its next turn reuses all of it.
    last = sessions["s11"]
    assert turn(engine, "s11-again", last, SamplingParams(temperature=0, max_tokens=2)).cached_tokens == (len(last) - 10 - 6) // CHUNK * CHUNK


def result_sampling(result: GenerationResult) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=len(result.completion_token_ids))
