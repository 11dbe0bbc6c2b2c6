/**
 * The ZeroMQ engine client against the real Python engine
 * (`python -m lego_rl.engine`) serving the tiny byte-tokenizer MoE model, and
 * the proxy in front of it answering the official `openai` SDK.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Dealer } from "zeromq";
import { loadProxyModel } from "../proxy/model.ts";
import { ProxyServer } from "../proxy/server.ts";
import { decodeControl, encodeControl } from "../schema/control-codec.ts";
import type { ControlMessage } from "../schema/generated.ts";
import { REPO_ROOT } from "../repo-root.ts";
import { EngineAbortedError, type EngineClient, type GenerateChunk, type GenerateRequest } from "./types.ts";
import { EngineRequestError, ZmqEngine } from "./zmq.ts";

const PYTHON = join(REPO_ROOT, ".venv/bin/python");
const MODEL = "tiny-bytes";
// Tiny model shape (lego_rl.model.tiny): 4 MoE layers, top-2 of 8 experts, 259 ids.
const LAYERS = 4;
const TOP_K = 2;

let dir: string;
let server: ChildProcess;
let address: string;
let engine: ZmqEngine;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "lego-zmq-engine-"));
  const modelDir = join(dir, MODEL);
  execFileSync(PYTHON, ["-m", "lego_rl.model.tiny", "--out", modelDir, "--tokenizer", "bytes", "--seed", "0"], { cwd: REPO_ROOT, stdio: "ignore" });
  // A context big enough that an un-aborted request would run for seconds.
  server = spawn(PYTHON, ["-m", "lego_rl.engine", "--model", modelDir, "--bind", "tcp://127.0.0.1:*", "--max-context", "4096"], {
    cwd: REPO_ROOT, stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = createInterface({ input: server.stdout! });
  const first = await new Promise<string>((resolve, reject) => {
    lines.once("line", resolve);
    server.once("exit", (code) => reject(new Error(`engine exited with ${code} before listening`)));
  });
  const listening = JSON.parse(first) as { type: string; address: string };
  expect(listening.type).toBe("listening");
  address = listening.address;
  engine = new ZmqEngine({ address, model: MODEL });
});

afterAll(async () => {
  await engine?.close();
  if (server && server.exitCode === null) {
    const exited = new Promise((resolve) => server.once("exit", resolve));
    server.kill("SIGTERM");
    await exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

function request(id: string, prompt: number[], maxTokens: number): GenerateRequest {
  return { request_id: id, prompt_ids: Int32Array.from(prompt), sampling: { temperature: 0, top_p: 1, max_tokens: maxTokens, stop_token_ids: [], seed: null } };
}

async function collect(stream: AsyncIterable<GenerateChunk>): Promise<GenerateChunk[]> {
  const chunks: GenerateChunk[] = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

describe("ZmqEngine", () => {
  it("streams one chunk per sampled token, then the routing of prompt and completion", async () => {
    const prompt = [...Buffer.from("Hello")];
    const chunks = await collect(engine.generate(request("stream-1", prompt, 6)));
    const tokens = chunks.slice(0, -1);
    // The last step's token came in the engine's result (final_tokens_in_result), yielded as a chunk of its own all the same.
    expect(tokens.map((c) => c.token_ids.length)).toEqual([1, 1, 1, 1, 1, 1]);
    expect(tokens.every((c) => c.finish_reason === null && c.routing === null && c.logprobs[0]! <= 0 && c.policy_version === 0)).toBe(true);
    const last = chunks.at(-1)!;
    expect(last.token_ids).toEqual([]);
    expect(last.finish_reason).toBe("length");
    expect(last.routing).toBeInstanceOf(Uint8Array); // 8 experts <= 256: the schema's uint8 routing
    expect(last.routing!.length).toBe(6 * LAYERS * TOP_K);
    expect(Array.from(last.routing_recorded!)).toEqual([1, 1, 1, 1, 1, 0]); // the last token is never fed back
    expect(last.prompt_routing!.length).toBe(prompt.length * LAYERS * TOP_K);
    expect(Math.max(...last.routing!, ...last.prompt_routing!)).toBeLessThan(8);
    // Greedy decoding is deterministic: a second run of the same prompt matches token for token.
    const again = await collect(engine.generate(request("stream-2", prompt, 6)));
    expect(again.flatMap((c) => c.token_ids)).toEqual(chunks.flatMap((c) => c.token_ids));
  });

  it("asked for a whole completion (stream false), yields it in one chunk: the same tokens, logprobs and routing as streamed", async () => {
    const prompt = [...Buffer.from("Hello")];
    const streamed = await collect(engine.generate(request("whole-streamed", prompt, 6)));
    const whole = await collect(engine.generate({ ...request("whole-1", prompt, 6), stream: false }));
    expect(whole).toHaveLength(1);
    const [only] = whole;
    expect(only!.finish_reason).toBe("length");
    expect(only!.token_ids).toEqual(streamed.flatMap((c) => c.token_ids));
    expect(only!.logprobs.map((x) => x.toFixed(4))).toEqual(streamed.flatMap((c) => c.logprobs).map((x) => x.toFixed(4)));
    expect(Array.from(only!.routing!)).toEqual(Array.from(streamed.at(-1)!.routing!));
    expect(Array.from(only!.routing_recorded!)).toEqual([1, 1, 1, 1, 1, 0]);
    expect(only!.prompt_routing!.length).toBe(prompt.length * LAYERS * TOP_K);
  });

  it("aborting the signal stops the request on the engine", async () => {
    const controller = new AbortController();
    const seen: number[] = [];
    const run = async () => {
      for await (const chunk of engine.generate(request("abort-1", [1, 2, 3], 4000), controller.signal)) {
        seen.push(...chunk.token_ids);
        controller.abort();
      }
    };
    await expect(run()).rejects.toBeInstanceOf(EngineAbortedError);
    expect(seen.length).toBe(1);
    // Messages of one connection are handled in order: this answer comes after the abort.
    expect((await engine.engineInfo()).active_requests).toBe(0);
  });

  it("an error reply becomes a typed EngineRequestError naming the code, request and field", async () => {
    const errorOf = async (stream: AsyncIterable<GenerateChunk>) => {
      try {
        await collect(stream);
      } catch (e) {
        return e;
      }
      return new Error("the request unexpectedly succeeded");
    };
    const zero = await errorOf(engine.generate(request("bad-1", [1, 2], 0)));
    expect(zero).toBeInstanceOf(EngineRequestError);
    expect(zero).toMatchObject({ code: "invalid_request", requestId: "bad-1", field: "sampling.max_tokens" });
    const oov = await errorOf(engine.generate(request("bad-2", [1, 300], 2)));
    expect(oov).toMatchObject({ code: "invalid_request", field: "prompt_token_ids" });
    expect((oov as Error).message).toContain("id 300 at position 1");
    const other = new ZmqEngine({ address, model: "qwen3-235b" });
    try {
      expect(await errorOf(other.generate(request("bad-3", [1], 2)))).toMatchObject({ code: "unknown_model", field: "model" });
    } finally {
      await other.close();
    }
    // The engine keeps serving.
    expect((await collect(engine.generate(request("after-errors", [1, 2], 2)))).at(-1)!.finish_reason).toBe("length");
  });

  it("marks refusals the caller can fix (a prompt over max_context, top_p 0) as rejections, by field and length", async () => {
    const errorOf = (stream: AsyncIterable<GenerateChunk>) => collect(stream).then(() => new Error("the request unexpectedly succeeded"), (e: unknown) => e);
    expect(await engine.contextWindow()).toBe(4096);
    const long = await errorOf(engine.generate(request("long-1", new Array<number>(4096).fill(7), 2)));
    expect(long).toBeInstanceOf(EngineRequestError);
    expect(long).toMatchObject({ code: "invalid_request", field: "prompt_token_ids", rejection: { field: "prompt_ids", promptTokens: 4096, contextWindow: 4096 } });
    const topP = await errorOf(engine.generate({ ...request("top-p-0", [1, 2], 2), sampling: { ...request("x", [], 2).sampling, top_p: 0 } }));
    expect(topP).toMatchObject({ code: "invalid_request", field: "sampling.top_p", rejection: { field: "sampling.top_p" } });
    // An id outside the vocabulary is the proxy's fault (a tokenizer that does not fit the model), not the caller's.
    expect(await errorOf(engine.generate(request("oov-1", [1, 300], 2)))).toMatchObject({ field: "prompt_token_ids", rejection: null });
  });
});

describe("the proxy in front of the Python engine", () => {
  it("answers OpenAI chat completions end to end, streamed or not, and records each turn with routing", async () => {
    const model = loadProxyModel(join(dir, MODEL));
    // What the proxy asks of the engine: a stream for every call (whole completions are not asked for; docs/proxy.md).
    const asked: Array<boolean | undefined> = [];
    const recording: EngineClient = {
      name: engine.name,
      contextWindow: () => engine.contextWindow(),
      close: () => Promise.resolve(),
      generate: (req, signal) => {
        asked.push(req.stream);
        return engine.generate(req, signal);
      },
    };
    const proxy = await ProxyServer.start({ model, engine: recording, servedModels: [MODEL] });
    try {
      const session = proxy.createSession();
      const client = new OpenAI({ baseURL: `${session.baseUrl}/v1`, apiKey: session.secret, maxRetries: 0 });
      const reply = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 8, temperature: 0 });
      const choice = reply.choices[0]!;
      expect(["stop", "length"]).toContain(choice.finish_reason);
      expect(typeof choice.message.content).toBe("string");
      // Another conversation (the same one again would be a retry of the first call).
      const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "ho" }], max_tokens: 8, temperature: 0, stream: true });
      let finish: string | null = null;
      for await (const part of stream) finish = part.choices[0]?.finish_reason ?? finish;
      expect(["stop", "length"]).toContain(finish);
      expect(asked).toEqual([undefined, undefined]);
      const records = proxy.closeSession(session.id);
      expect(records.turns).toHaveLength(2);
      expect(records.turns[0]!.completion_ids.length).toBe(reply.usage!.completion_tokens);
      for (const t of records.turns) {
        expect(t.routing!.length).toBe(t.completion_ids.length * LAYERS * TOP_K);
        expect(t.prompt_routing!.length).toBe(t.prompt_ids.length * LAYERS * TOP_K);
        expect(t.timings.first_token_ms).not.toBeNull();
      }
      expect(records.segments[0]!.routing_recorded).not.toBeNull();
    } finally {
      await proxy.close();
    }
  });
});

describe("routing coverage with the Python engine", () => {
  it("records a routing row for every token of a multi-turn segment but its last: each turn's last token from the next prefill", async () => {
    const model = loadProxyModel(join(dir, MODEL));
    const proxy = await ProxyServer.start({ model, engine, servedModels: [MODEL] });
    try {
      const session = proxy.createSession();
      const client = new OpenAI({ baseURL: `${session.baseUrl}/v1`, apiKey: session.secret, maxRetries: 0 });
      const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "hi" }];
      for (let turn = 0; turn < 3; turn++) {
        const reply = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 6, temperature: 0 });
        messages.push({ role: "assistant", content: reply.choices[0]!.message.content ?? "" }, { role: "user", content: `and ${turn}?` });
      }
      const records = proxy.closeSession(session.id);
      expect(records.segments.map((s) => [s.seal_reason, s.turns.length])).toEqual([["finished", 3]]);
      const [seg] = records.segments;
      // The engine reports no row for a turn's last sampled token ...
      for (const t of records.turns) expect(t.routing!.subarray((t.completion_ids.length - 1) * LAYERS * TOP_K).every((v) => v === 0)).toBe(true);
      // ... and the segment has one for every token the trainer feeds.
      expect(records.routing_coverage).toEqual([{ segment_id: seg!.segment_id, thread_id: "main", rows_needed: seg!.token_ids.length - 1, rows_recorded: seg!.token_ids.length - 1, coverage: 1 }]);
      // A filled row is what the next turn's prefill computed for that position.
      const width = LAYERS * TOP_K;
      for (const [i, span] of seg!.turns.slice(0, -1).entries()) {
        const p = span.completion_end - 1;
        const next = records.turns[i + 1]!;
        expect(Array.from(seg!.routing!.subarray(p * width, (p + 1) * width))).toEqual(Array.from(next.prompt_routing!.subarray(p * width, (p + 1) * width)));
      }
    } finally {
      await proxy.close();
    }
  });
});

// Last: it moves the engine to policy version 1.
describe("weights updated while the client streams", () => {
  it("later chunks carry the new version, the last chunk the oldest, and a refused update changes nothing", async () => {
    const v1 = join(dir, "v1");
    execFileSync(PYTHON, ["-m", "lego_rl.model.tiny", "--out", v1, "--tokenizer", "bytes", "--seed", "1"], { cwd: REPO_ROOT, stdio: "ignore" });
    const trainer = new Dealer({ linger: 0 });
    trainer.connect(address);
    const ask = async (message: ControlMessage): Promise<ControlMessage> => {
      await trainer.send(encodeControl(message));
      const [frame] = await trainer.receive();
      return decodeControl(frame!);
    };
    try {
      const chunks: GenerateChunk[] = [];
      let reply: ControlMessage | null = null;
      // The update lands a few tokens after it is sent, far before 300.
      for await (const chunk of engine.generate(request("update-1", [1, 2, 3], 300))) {
        chunks.push(chunk);
        if (chunks.length === 3) reply = await ask({ kind: "update_weights", request_id: "u1", version: 1, path: v1 });
      }
      expect(reply).toEqual({ kind: "weights_updated", request_id: "u1", version: 1 });
      const versions = chunks.slice(0, -1).map((c) => c.policy_version);
      const switchAt = versions.indexOf(1);
      expect(switchAt).toBeGreaterThanOrEqual(3);
      expect(versions).toEqual([...Array<number>(switchAt).fill(0), ...Array<number>(versions.length - switchAt).fill(1)]);
      expect(chunks.at(-1)).toMatchObject({ finish_reason: "length", policy_version: 0 });

      const refused = await ask({ kind: "update_weights", request_id: "u0", version: 1, path: v1 });
      expect(refused).toMatchObject({ kind: "error", code: "weight_update", request_id: "u0", field: "version" });
      expect((await engine.engineInfo()).policy_version).toBe(1);
      const after = await collect(engine.generate(request("update-2", [1, 2, 3], 3)));
      expect(after.map((c) => c.policy_version)).toEqual([1, 1, 1, 1]);
    } finally {
      trainer.close();
    }
  });
});
