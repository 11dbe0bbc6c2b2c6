"""The sampler draws from softmax(logits / T) truncated to top_p, one uniform per row per step."""

from __future__ import annotations

import torch

from lego_rl.engine.sampling import UniformStream, choose_tokens
from lego_rl.engine.types import SamplingParams

LOGITS_V = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03, 0.0]))  # the last token has probability 0


def frequencies(params: SamplingParams, draws: int, logits_V: torch.Tensor = LOGITS_V) -> torch.Tensor:
    streams = [UniformStream(seed) for seed in range(draws)]
    tokens = choose_tokens(logits_V.expand(draws, -1).clone(), [params] * draws, streams)
    return torch.bincount(torch.tensor(tokens), minlength=logits_V.shape[0]).double() / draws


def test_draws_follow_the_softmax_and_never_pick_a_zero_probability_token():
    freq = frequencies(SamplingParams(temperature=1.0, max_tokens=1), 40_000)
    expected = torch.softmax(LOGITS_V, -1).double()
    assert freq[-1] == 0
    # 40k draws: a standard error of at most 0.0025 per token; 4 of them is a loose bound.
    assert torch.allclose(freq, expected, atol=0.01), (freq, expected)


def test_temperature_sharpens_and_top_p_truncates():
    cold = frequencies(SamplingParams(temperature=0.5, max_tokens=1), 20_000)
    assert torch.allclose(cold, torch.softmax(LOGITS_V / 0.5, -1).double(), atol=0.015)
    nucleus = frequencies(SamplingParams(temperature=1.0, top_p=0.7, max_tokens=1), 20_000)
    # The smallest set reaching 0.7 is {0.5, 0.25}: renormalised to 2/3 and 1/3.
    assert nucleus[2:].sum() == 0
    assert abs(float(nucleus[0]) - 2 / 3) < 0.015


def test_each_row_consumes_exactly_one_uniform_of_its_own_stream():
    lone = UniformStream(7)
    first = choose_tokens(LOGITS_V[None], [SamplingParams(temperature=1.0, max_tokens=1)], [lone])
    crowd = [UniformStream(7), UniformStream(8)]
    greedy, sampled = SamplingParams(temperature=0.0, max_tokens=1), SamplingParams(temperature=1.0, max_tokens=1)
    together = choose_tokens(LOGITS_V.expand(3, -1).clone(), [greedy, sampled, sampled], [UniformStream(9), *crowd])
    assert together[0] == 0 and together[1] == first[0]
    assert lone.next() == crowd[0].next()  # both streams advanced by one draw


def test_a_large_vocabulary_row_is_drawn_in_proportion():
    logits_V = torch.full((151_669,), -30.0)
    logits_V[[3, 151_668]] = 0.0  # two equally likely tokens, one at the very end
    freq = frequencies(SamplingParams(temperature=1.0, max_tokens=1), 400, logits_V)
    assert freq[3] + freq[151_668] > 0.99
    assert abs(float(freq[3]) - 0.5) < 0.1  # 400 draws: standard error 0.025
