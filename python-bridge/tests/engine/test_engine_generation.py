"""Engine generations agree with single requests, with the model's own forward pass and with seeds."""

import torch

from lego_rl.engine import Engine, GenerationRequest, GenerationResult, SamplingParams, TokenEvent
from lego_rl.model import MoeForCausalLM


def prompt(i: int, n: int = 12) -> tuple[int, ...]:
    return tuple((17 * i + 5 * j) % 256 for j in range(n + i))


def greedy(rid: str, ids: tuple[int, ...], max_tokens: int = 24) -> GenerationRequest:
    return GenerationRequest(request_id=rid, prompt_token_ids=ids, sampling=SamplingParams(temperature=0, max_tokens=max_tokens))


def full_forward(model: MoeForCausalLM, result: GenerationResult, replay: bool = False):
    """Logits, raw logprobs of the completion and routing of one forward over what the engine
    fed: prompt + completion but the last sampled token, which is never fed back."""
    ids = torch.tensor([*result.prompt_token_ids, *result.completion_token_ids])
    routing = torch.cat([result.prompt_routing, result.completion_routing]) if replay else None
    with torch.no_grad():
        out = model(ids[:-1], routing_replay=routing, return_routing=True)
    P = len(result.prompt_token_ids)
    logprobs = torch.log_softmax(out.logits.float(), -1)[P - 1 :].gather(1, ids[P:, None])[:, 0]
    return out.logits, logprobs, out.routing


def test_sixteen_concurrent_greedy_generations_equal_single_requests(byte_model: MoeForCausalLM):
    requests = [greedy(f"r{i}", prompt(i)) for i in range(16)]
    batched = Engine(byte_model).generate(requests)
    for req in requests:
        alone = Engine(byte_model).generate([req])[req.request_id]
        got = batched[req.request_id]
        assert got.completion_token_ids == alone.completion_token_ids
        assert len(got.completion_token_ids) == 24 and got.finish_reason == "length"
        assert (got.logprobs - alone.logprobs).abs().max().item() < 1e-5


def test_engine_logprobs_and_routing_equal_the_models_full_forward(byte_model: MoeForCausalLM):
    requests = [
        GenerationRequest(request_id=f"s{i}", prompt_token_ids=prompt(i), sampling=SamplingParams(temperature=0.8, top_p=0.95, max_tokens=20, seed=i))
        for i in range(4)
    ]
    for result in Engine(byte_model).generate(requests).values():
        P, C = len(result.prompt_token_ids), len(result.completion_token_ids)
        assert result.prompt_routing.shape == (P, 4, 2) and result.completion_routing.shape == (C - 1, 4, 2)
        logits, logprobs, routing = full_forward(byte_model, result)
        assert (logprobs - result.logprobs).abs().max().item() < 1e-5
        assert torch.equal(routing, torch.cat([result.prompt_routing, result.completion_routing]))
        replayed_logits, _, _ = full_forward(byte_model, result, replay=True)
        assert torch.equal(replayed_logits, logits)


def test_a_seed_reproduces_the_same_sample_alone_or_in_a_batch(byte_model: MoeForCausalLM):
    def sampled(rid: str, seed: int) -> GenerationRequest:
        return GenerationRequest(request_id=rid, prompt_token_ids=prompt(3), sampling=SamplingParams(temperature=1.0, max_tokens=16, seed=seed))

    alone = Engine(byte_model).generate([sampled("a", 11)])["a"]
    crowd = Engine(byte_model).generate([greedy("g1", prompt(1)), sampled("a", 11), sampled("b", 12), greedy("g2", prompt(2))])
    assert crowd["a"].completion_token_ids == alone.completion_token_ids
    assert crowd["a"].seed == 11
    assert crowd["b"].completion_token_ids != alone.completion_token_ids


def test_top_p_that_keeps_one_token_is_greedy(byte_model: MoeForCausalLM):
    nucleus = GenerationRequest(request_id="n", prompt_token_ids=prompt(5), sampling=SamplingParams(temperature=1.0, top_p=1e-6, max_tokens=12, seed=0))
    got = Engine(byte_model).generate([nucleus, greedy("g", prompt(5), 12)])
    assert got["n"].completion_token_ids == got["g"].completion_token_ids


def test_a_request_joins_between_decode_steps(byte_model: MoeForCausalLM):
    engine = Engine(byte_model)
    engine.submit(greedy("early", prompt(1), 10))
    for _ in range(3):
        assert [e.request_id for e in engine.step()] == ["early"]
    engine.submit(greedy("late", prompt(2), 10))
    joined = engine.step()
    assert [(type(e), e.request_id) for e in joined] == [(TokenEvent, "early"), (TokenEvent, "late")]
    results = {}
    while engine.has_work:
        results.update({e.request_id: e for e in engine.step() if isinstance(e, GenerationResult)})
    for rid, p in [("early", prompt(1)), ("late", prompt(2))]:
        alone = Engine(byte_model).generate([greedy(rid, p, 10)])[rid]
        assert results[rid].completion_token_ids == alone.completion_token_ids


def test_stop_token_ends_the_completion_and_is_included(byte_model: MoeForCausalLM):
    reference = Engine(byte_model).generate([greedy("r", prompt(4), 24)])["r"].completion_token_ids
    stop = reference[5]
    first = reference.index(stop)
    req = GenerationRequest(request_id="s", prompt_token_ids=prompt(4), sampling=SamplingParams(temperature=0, max_tokens=24, stop_token_ids=(stop,)))
    result = Engine(byte_model).generate([req])["s"]
    assert result.completion_token_ids == reference[: first + 1]
    assert result.finish_reason == "stop"
    assert result.completion_routing.shape[0] == first  # the stop token is never fed back


def test_copies_of_one_prompt_admitted_together_prefill_once_and_sample_as_they_would_alone(byte_model: MoeForCausalLM):
    def copy(i: int) -> GenerationRequest:
        return GenerationRequest(request_id=f"c{i}", prompt_token_ids=prompt(5),
                                 sampling=SamplingParams(temperature=1.0, max_tokens=12, seed=100 + i))

    engine = Engine(byte_model)
    calls: list[int] = []
    forward = engine.model.forward

    def counting_forward(ids, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(ids.numel())
        return forward(ids, **kwargs)

    engine.model.forward = counting_forward  # type: ignore[method-assign]
    group = engine.generate([copy(i) for i in range(4)] + [greedy("other", prompt(6))])
    assert calls[0] == len(prompt(5)) + len(prompt(6))  # the shared prompt went through the model once
    for i in range(4):
        alone = Engine(byte_model).generate([copy(i)])[f"c{i}"]
        got = group[f"c{i}"]
        assert got.completion_token_ids == alone.completion_token_ids
        assert (got.logprobs - alone.logprobs).abs().max().item() < 1e-5
        assert torch.equal(got.prompt_routing, alone.prompt_routing)
        _, logprobs, routing = full_forward(byte_model, got)
        assert (logprobs - got.logprobs).abs().max().item() < 1e-5
        assert torch.equal(routing, torch.cat([got.prompt_routing, got.completion_routing]))
    assert len({tuple(group[f"c{i}"].completion_token_ids) for i in range(4)}) > 1  # each copy drew its own sample
