import { describe, expect, it } from "vitest";
import { ScriptedEngine, fakeLogprob } from "./scripted.ts";
import type { GenerateChunk, GenerateRequest } from "./types.ts";

const encode = (t: string) => [...t].map((c) => c.charCodeAt(0));
const req = (max_tokens: number, stop: number[] = [0]): GenerateRequest => ({ request_id: "r", prompt_ids: [7, 7], sampling: { temperature: 1, top_p: 1, max_tokens, stop_token_ids: stop, seed: null } });

async function all(e: ScriptedEngine, r: GenerateRequest): Promise<GenerateChunk[]> {
  const out: GenerateChunk[] = [];
  for await (const c of e.generate(r)) out.push(c);
  return out;
}

describe("scripted engine", () => {
  it("replies in script order, appends the end-of-turn id, and chunks the tokens", async () => {
    const e = new ScriptedEngine({ script: [{ text: "abc" }, { token_ids: [5, 6] }], encode, endOfTurnId: 0, chunkSize: 2 });
    const first = await all(e, req(10));
    expect(first.map((c) => [c.token_ids, c.finish_reason])).toEqual([[[97, 98], null], [[99, 0], "stop"]]);
    expect(first[0]!.logprobs).toEqual([fakeLogprob(2, 97), fakeLogprob(3, 98)]);
    expect((await all(e, req(10))).flatMap((c) => c.token_ids)).toEqual([5, 6]);
    await expect(all(e, req(10))).rejects.toThrow(/script has 2 replies; call 2 has none/);
    expect(e.prompts.map((p) => Array.from(p))).toEqual([[7, 7], [7, 7], [7, 7]]);
  });

  it("cuts at max_tokens with finish_reason length", async () => {
    const e = new ScriptedEngine({ script: [{ text: "abcdef" }], encode, endOfTurnId: 0 });
    const chunks = await all(e, req(3));
    expect(chunks.flatMap((c) => c.token_ids)).toEqual([97, 98, 99]);
    expect(chunks.at(-1)!.finish_reason).toBe("length");
  });

  it("gives deterministic MoE routing of [tokens, layers, top_k]", async () => {
    const make = () => new ScriptedEngine({ script: () => ({ text: "ab" }), encode, endOfTurnId: 0, moe: { layers: 3, topK: 2, experts: 300 } });
    const [a] = await all(make(), req(10));
    const [b] = await all(make(), req(10));
    expect(a!.routing).toBeInstanceOf(Uint16Array);
    expect(a!.routing!.length).toBe(3 * 3 * 2);
    expect(a!.routing).toEqual(b!.routing);
  });

  it("sends each chunk when decodeMsPerToken says its last token is sampled, keeps no prompts when asked, and aborts mid-wait", async () => {
    const e = new ScriptedEngine({ script: () => ({ text: "abc" }), encode, endOfTurnId: 0, chunkSize: 2, decodeMsPerToken: 15, recordPrompts: false });
    const t0 = performance.now();
    const arrivals: number[] = [];
    const chunks: GenerateChunk[] = [];
    for await (const c of e.generate(req(10))) {
      arrivals.push(performance.now() - t0);
      chunks.push(c);
    }
    expect(chunks.map((c) => c.token_ids.length)).toEqual([2, 2]);
    // Timers never fire early: each chunk waited at least until its own tokens were due.
    expect(arrivals[0]).toBeGreaterThanOrEqual(2 * 15 - 1);
    expect(arrivals[1]).toBeGreaterThanOrEqual(4 * 15 - 1);
    expect(e.prompts).toEqual([]);
    const ac = new AbortController();
    const it = new ScriptedEngine({ script: () => ({ text: "abc" }), encode, endOfTurnId: 0, decodeMsPerToken: 10_000 }).generate(req(10), ac.signal)[Symbol.asyncIterator]();
    const next = it.next();
    setTimeout(() => ac.abort(), 5);
    await expect(next).rejects.toThrow(/aborted/);
  });

  it("throws EngineAbortedError once the signal is aborted", async () => {
    const e = new ScriptedEngine({ script: () => ({ text: "abcdefgh" }), encode, endOfTurnId: 0, chunkSize: 1 });
    const ac = new AbortController();
    const it = e.generate(req(10), ac.signal)[Symbol.asyncIterator]();
    await it.next();
    ac.abort();
    await expect(it.next()).rejects.toThrow(/aborted/);
  });
});
