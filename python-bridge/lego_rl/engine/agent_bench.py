"""The agent workload of `python -m lego_rl.engine.bench --workload agent`: multi-turn sessions, engine vs HF.

Each of `sessions` sessions runs `turns` turns. Turn 1's prompt is a shared system prompt with
tool definitions (~1,500 Qwen3 tokens) and the session's task; turn k+1's prompt is turn k's
prompt + its completion + a tool result (50-400 tokens) in the Qwen3 chat format, exactly what
an agent harness re-sends each turn. Completion lengths are drawn per turn (20-120) and forced
on both sides (EOS ignored), so both do the same work; each side continues from its own
completions.

- Our engine: all sessions' turn-k requests in flight together (continuous batching, chunked
  prefill, prefix cache: turn k prefills only what turn k-1 did not).
- transformers `generate()` as a simple server would: static batches of `hf_batch` sessions,
  left-padded, the whole history re-prefilled every turn, its own KV cache within a turn.

The sides alternate turn by turn (who goes first alternates too), so a host that changes
speed mid-run slows both alike; each side's time is the sum of its turns.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from lego_rl.model import find_qwen3_tokenizer_dir

from .engine import Engine, EngineConfig
from .types import GenerationRequest, SamplingParams


@dataclass(kw_only=True, slots=True, frozen=True)
class AgentWorkload:
    """Shape of the replayed agent workload."""

    sessions: int = 16
    """Concurrent sessions (rollouts)."""
    turns: int = 12
    """Turns per session."""
    system_tokens: int = 1500
    """Shared system prompt with tool definitions, about this many tokens."""
    tool_result_tokens: tuple[int, int] = (50, 400)
    """Each tool result's length, drawn uniformly per session and turn."""
    completion_tokens: tuple[int, int] = (20, 120)
    """Each turn's completion length, drawn per turn and forced on both sides."""
    hf_batch: int = 8
    """transformers' static batch size."""
    seed: int = 0


_TOOLS = [
    {"name": "bash", "description": "Run a shell command in the repository and return stdout, stderr and the exit code.",
     "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "The command line."},
                                                     "timeout_s": {"type": "integer", "description": "Kill it after this many seconds."}},
                    "required": ["command"]}},
    {"name": "read_file", "description": "Read a file of the repository, optionally a range of lines.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "start_line": {"type": "integer"},
                                                     "end_line": {"type": "integer"}}, "required": ["path"]}},
    {"name": "edit_file", "description": "Replace one exact occurrence of old_text with new_text in a file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "old_text": {"type": "string"},
                                                     "new_text": {"type": "string"}}, "required": ["path", "old_text", "new_text"]}},
    {"name": "search", "description": "Search the repository for a regular expression; returns matching lines with paths.",
     "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}, "glob": {"type": "string"}}, "required": ["pattern"]}},
]

_WORDS = ("def class return import self value error test assert path file line module config request result token "
          "session engine cache batch step update version weights index count list dict none true false raise").split()


class _Text:
    """Deterministic agent-like text, tokenized by the real Qwen3 tokenizer."""

    def __init__(self, seed: int) -> None:
        from tokenizers import Tokenizer  # a dependency of transformers; only the benchmark needs it

        self.tokenizer = Tokenizer.from_file(str(find_qwen3_tokenizer_dir() / "tokenizer.json"))
        self.rng = random.Random(seed)

    def ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def code(self, n_tokens: int) -> list[int]:
        """About `n_tokens` of code-and-log-like text, cut to exactly n_tokens."""
        out: list[int] = []
        while len(out) < n_tokens:
            words = self.rng.choices(_WORDS, k=12)
            line = f"{self.rng.randint(1, 999):>4}  {words[0]}_{words[1]}({', '.join(words[2:5])}) -> {words[5]}.{words[6]}  # {' '.join(words[7:])}\n"
            out += self.ids(line)
        return out[:n_tokens]


def _system_prompt(text: _Text, n_tokens: int) -> list[int]:
    tools = "\n".join(json.dumps({"type": "function", "function": t}) for t in _TOOLS)
    head = text.ids(
        "<|im_start|>system\nYou are a coding agent working in a git repository. Read the task, inspect the code, "
        "run the tests, make the smallest correct change and explain it.\n\n# Tools\n\nYou may call one or more functions "
        f"to assist with the user query.\n\n<tools>\n{tools}\n</tools>\n\nFor each function call, return a json object "
        "within <tool_call></tool_call> XML tags.\n\n# Repository guide\n"
    )
    tail = text.ids("<|im_end|>\n")
    return head + text.code(max(0, n_tokens - len(head) - len(tail))) + tail


@dataclass(slots=True)
class _Plan:
    first_prompts: list[list[int]]
    """Turn 1 of each session: system prompt + task."""
    tool_results: list[list[list[int]]]
    """[session][turn] the tokens appended after turn k's completion (tool result in the chat format)."""
    completion_lengths: list[int]
    """[turn] forced completion length."""


def plan(workload: AgentWorkload) -> _Plan:
    text = _Text(workload.seed)
    system = _system_prompt(text, workload.system_tokens)
    rng = random.Random(workload.seed + 1)
    first = []
    for s in range(workload.sessions):
        task = text.ids(f"<|im_start|>user\nTask {s}: the test suite fails in module {rng.choice(_WORDS)}; fix it.\n") + text.code(rng.randint(60, 200))
        first.append(system + task + text.ids("<|im_end|>\n<|im_start|>assistant\n"))
    wrap_open = text.ids("<|im_end|>\n<|im_start|>user\n<tool_response>\n")
    wrap_close = text.ids("\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    lo, hi = workload.tool_result_tokens
    tools = [[wrap_open + text.code(rng.randint(lo, hi)) + wrap_close for _ in range(workload.turns)] for _ in range(workload.sessions)]
    lengths = [rng.randint(*workload.completion_tokens) for _ in range(workload.turns)]
    return _Plan(first_prompts=first, tool_results=tools, completion_lengths=lengths)


class _EngineSide:
    def __init__(self, model_dir: Path, config: EngineConfig) -> None:
        self.engine = Engine.from_model_dir(model_dir, config)

    def turn(self, prompts: list[list[int]], k: int, n_tokens: int) -> list[list[int]]:
        sampling = SamplingParams(temperature=0, max_tokens=n_tokens)  # no stop ids: EOS is ignored
        requests = [GenerationRequest(request_id=f"s{s}/turn-{k}", prompt_token_ids=tuple(p), sampling=sampling) for s, p in enumerate(prompts)]
        results = self.engine.generate(requests)
        return [results[r.request_id].completion_token_ids for r in requests]


class _HfSide:
    def __init__(self, model_dir: Path, batch: int, pad_id: int) -> None:
        from transformers import AutoModelForCausalLM  # dev dependency; only the benchmark needs it

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.batch, self.pad_id = batch, pad_id

    @torch.inference_mode()
    def turn(self, prompts: list[list[int]], k: int, n_tokens: int) -> list[list[int]]:
        out: list[list[int]] = []
        for i in range(0, len(prompts), self.batch):
            group = prompts[i : i + self.batch]
            width = max(map(len, group))
            ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in group])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in group])
            generated = self.model.generate(ids, attention_mask=mask, max_new_tokens=n_tokens, min_new_tokens=n_tokens,
                                            do_sample=False, pad_token_id=self.pad_id)
            out += generated[:, width:].tolist()
        assert all(len(c) == n_tokens for c in out)
        return out


def run(model_dir: Path, workload: AgentWorkload, engine_config: EngineConfig, pad_id: int) -> dict[str, float | int]:
    """Replays the workload through both sides, interleaved turn by turn; the figures for the report."""
    p = plan(workload)
    ours, hf = _EngineSide(model_dir, engine_config), _HfSide(model_dir, workload.hf_batch, pad_id)
    warm = [p.first_prompts[0][:64]]
    ours.turn(warm, -1, 4), hf.turn(warm, -1, 4)
    stats_before = dict(ours.engine.stats)
    sides = {"engine": ours, "hf": hf}
    prompts = {name: [list(fp) for fp in p.first_prompts] for name in sides}
    seconds = {name: 0.0 for name in sides}
    prompt_tokens = 0
    for k, n in enumerate(p.completion_lengths):
        prompt_tokens += sum(map(len, prompts["engine"]))
        for name in (("engine", "hf") if k % 2 == 0 else ("hf", "engine")):
            start = time.perf_counter()
            completions = sides[name].turn(prompts[name], k, n)
            seconds[name] += time.perf_counter() - start
            prompts[name] = [pr + c + p.tool_results[s][k] for s, (pr, c) in enumerate(zip(prompts[name], completions))]
        print(f"turn {k + 1}/{workload.turns}: {n} new tokens, engine {seconds['engine']:.1f} s, hf {seconds['hf']:.1f} s so far", flush=True)
    stats = {key: ours.engine.stats[key] - stats_before[key] for key in stats_before}
    assert stats["prompt_tokens"] == prompt_tokens
    completion = workload.sessions * sum(p.completion_lengths)
    return {
        "engine_s": round(seconds["engine"], 2),
        "hf_s": round(seconds["hf"], 2),
        "vs_hf_agent": round(seconds["hf"] / seconds["engine"], 2),
        "prefix_hit_rate": round(stats["cached_prompt_tokens"] / prompt_tokens, 4),
        "prompt_tokens": prompt_tokens,
        "prefill_tokens_saved": stats["cached_prompt_tokens"],
        "prefill_tokens_computed": stats["computed_prompt_tokens"],
        "completion_tokens": completion,
        "sessions": workload.sessions,
        "turns": workload.turns,
    }
