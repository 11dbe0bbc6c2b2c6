/**
 * Bad input gets an error in the API's own shape (OpenAI `{"error":{…}}`,
 * Anthropic `{"type":"error","error":{…}}`), and never disturbs other sessions.
 */
import { request } from "node:http";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { EngineAbortedError, EngineError, type EngineClient, type GenerateChunk, type GenerateRequest } from "../engine/types.ts";
import type { ProxyServer, ProxySession, RequestEnd } from "./server.ts";
import { MODEL_NAME, qwen3, scriptedEngine, startProxy } from "./test-support.ts";

let proxy: ProxyServer | null = null;
afterEach(async () => {
  await proxy?.close();
  proxy = null;
});

async function post(s: ProxySession, path: string, body: string, headers: Record<string, string> = { authorization: `Bearer ${s.secret}` }) {
  const res = await fetch(`${s.baseUrl}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const oa = (msg: string) => JSON.stringify({ model: MODEL_NAME, messages: [{ role: "user", content: msg }] });
const an = (msg: string) => JSON.stringify({ model: MODEL_NAME, max_tokens: 10, messages: [{ role: "user", content: msg }] });

describe("bad input", () => {
  async function twoSessions() {
    proxy = await startProxy(scriptedEngine(qwen3(), () => ({ text: "fine" })), { maxBodyBytes: 4096 });
    return { a: proxy.createSession("a"), b: proxy.createSession("b") };
  }

  it("answers malformed JSON with 400 in each API's shape", async () => {
    const { a } = await twoSessions();
    const r1 = await post(a, "/v1/chat/completions", "{not json");
    expect(r1.status).toBe(400);
    expect(r1.body).toMatchObject({ error: { type: "invalid_request_error", param: null, code: null } });
    const r2 = await post(a, "/v1/messages", "{not json", { "x-api-key": a.secret });
    expect(r2).toMatchObject({ status: 400, body: { type: "error", error: { type: "invalid_request_error" } } });
  });

  it("names the field of the wrong type", async () => {
    const { a } = await twoSessions();
    const r1 = await post(a, "/v1/chat/completions", JSON.stringify({ model: MODEL_NAME, messages: [{ role: "user", content: 5 }] }));
    expect(r1).toMatchObject({ status: 400, body: { error: { param: "messages[0].content" } } });
    const r2 = await post(a, "/v1/messages", JSON.stringify({ model: MODEL_NAME, max_tokens: "10", messages: [] }), { "x-api-key": a.secret });
    expect(r2).toMatchObject({ status: 400, body: { error: { type: "invalid_request_error", message: "max_tokens: expected a number in [1, Infinity]" } } });
  });

  it("refuses an unknown session or a wrong secret with 401", async () => {
    const { a, b } = await twoSessions();
    const wrong = await post(a, "/v1/messages", an("x"), { "x-api-key": b.secret });
    expect(wrong).toEqual({ status: 401, body: { type: "error", error: { type: "authentication_error", message: "invalid secret for session a" } } });
    const unknown = await post({ ...a, baseUrl: a.baseUrl.replace("/s/a", "/s/zzz") }, "/v1/chat/completions", oa("x"));
    expect(unknown).toMatchObject({ status: 401, body: { error: { code: "invalid_api_key" } } });
    const none = await post(a, "/v1/chat/completions", oa("x"), {});
    expect(none.status).toBe(401);
  });

  it("refuses an oversized body with 413", async () => {
    const { a, b } = await twoSessions();
    const big = oa("x".repeat(10_000));
    expect(await post(a, "/v1/messages", big, { "x-api-key": a.secret })).toMatchObject({ status: 413, body: { type: "error", error: { type: "request_too_large" } } });
    expect(await post(a, "/v1/chat/completions", big)).toMatchObject({ status: 413, body: { error: { code: "request_too_large" } } });
    expect((await post(b, "/v1/chat/completions", oa("small"))).status).toBe(200);
  });

  it("refuses an unknown model with 404", async () => {
    const { a } = await twoSessions();
    const client = new Anthropic({ baseURL: a.baseUrl, apiKey: a.secret, maxRetries: 0 });
    const err = await client.messages.create({ model: "claude-opus-9", max_tokens: 5, messages: [{ role: "user", content: "x" }] }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
    expect((err as InstanceType<typeof Anthropic.NotFoundError>).error).toMatchObject({ type: "error", error: { type: "not_found_error" } });
    const r = await post(a, "/v1/chat/completions", JSON.stringify({ model: "gpt-9", messages: [{ role: "user", content: "x" }] }));
    expect(r).toMatchObject({ status: 404, body: { error: { code: "model_not_found", param: "model" } } });
  });

  it("refuses an invalid tool schema with 400", async () => {
    const { a } = await twoSessions();
    const client = new OpenAI({ baseURL: `${a.baseUrl}/v1`, apiKey: a.secret, maxRetries: 0 });
    const err = await client.chat.completions
      .create({ model: MODEL_NAME, messages: [{ role: "user", content: "x" }], tools: [{ type: "function", function: { name: "bad name!", parameters: { type: "object" } } }] })
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    const r = await post(a, "/v1/messages", JSON.stringify({ model: MODEL_NAME, max_tokens: 5, messages: [{ role: "user", content: "x" }], tools: [{ name: "t", input_schema: { type: "array" } }] }), { "x-api-key": a.secret });
    expect(r).toMatchObject({ status: 400, body: { error: { type: "invalid_request_error", message: 'tools.0.input_schema.type: a tool\'s schema must have type "object"' } } });
  });

  it("refuses a tool_choice that requires a tool call when the request declares no tools", async () => {
    const { a } = await twoSessions();
    const chat = await post(a, "/v1/chat/completions", JSON.stringify({ model: MODEL_NAME, messages: [{ role: "user", content: "x" }], tool_choice: "required" }));
    expect(chat).toEqual({ status: 400, body: { error: { message: 'tool_choice: "required" needs at least one tool in tools', type: "invalid_request_error", param: "tool_choice", code: null } } });
    const responses = await post(a, "/v1/responses", JSON.stringify({ model: MODEL_NAME, input: "x", tool_choice: "required" }));
    expect(responses).toMatchObject({ status: 400, body: { error: { param: "tool_choice" } } });
    const messages = await post(a, "/v1/messages", JSON.stringify({ model: MODEL_NAME, max_tokens: 5, messages: [{ role: "user", content: "x" }], tool_choice: { type: "any" } }), { "x-api-key": a.secret });
    expect(messages).toEqual({ status: 400, body: { type: "error", error: { type: "invalid_request_error", message: 'tool_choice: type "any" needs at least one tool in tools' } } });
  });

  it("answers an unknown route with 404", async () => {
    const { a } = await twoSessions();
    expect((await post(a, "/v1/embeddings", oa("x"))).status).toBe(404);
  });
});

/** An engine that, for session "gone", sends one token and then waits until the request is aborted; other sessions get "Hi". */
class StallingEngine implements EngineClient {
  readonly name = "stalling";
  readonly aborted: string[] = [];
  private wakeOnAbort!: () => void;
  readonly sawAbort = new Promise<void>((r) => (this.wakeOnAbort = r));

  async *generate(req: GenerateRequest, signal?: AbortSignal): AsyncIterable<GenerateChunk> {
    if (!req.request_id.startsWith("gone/")) {
      yield { token_ids: [13048, 151645], logprobs: [-0.5, -0.1], routing: null, policy_version: 3, finish_reason: "stop" };
      return;
    }
    yield { token_ids: [9707], logprobs: [-0.5], routing: null, policy_version: 3, finish_reason: null };
    await new Promise<void>((resolve) => signal!.addEventListener("abort", () => resolve(), { once: true }));
    this.aborted.push(req.request_id);
    this.wakeOnAbort();
    throw new EngineAbortedError(this.name, req.request_id);
  }

  async close(): Promise<void> {}
}

describe("failures during generation", () => {
  it("aborts the engine request when the client disconnects mid-stream and records the turn as aborted", async () => {
    const engine = new StallingEngine();
    let turnEnded!: () => void;
    const ended = new Promise<void>((r) => (turnEnded = r));
    const requestEnds: RequestEnd[] = [];
    proxy = await startProxy(engine, { onTurn: () => turnEnded(), onRequestEnd: (e) => requestEnds.push(e) });
    const s = proxy.createSession("gone");
    const other = proxy.createSession("other");
    await new Promise<void>((resolve, reject) => {
      const req = request(`${s.baseUrl}/v1/messages`, { method: "POST", headers: { "x-api-key": s.secret } }, (res) => {
        res.once("data", () => {
          req.destroy();
          resolve();
        });
      });
      req.once("error", (e) => (e.message === "socket hang up" ? undefined : reject(e)));
      req.end(JSON.stringify({ model: MODEL_NAME, max_tokens: 10, stream: true, messages: [{ role: "user", content: "hi" }] }));
    });
    await engine.sawAbort;
    await ended;
    expect(engine.aborted).toEqual(["gone/turn-0"]);
    const ok = await post(other, "/v1/messages", an("x"), { "x-api-key": other.secret });
    expect(ok).toMatchObject({ status: 200, body: { content: [{ type: "text", text: "Hi" }] } });
    const records = proxy.closeSession(s.id);
    expect(records.segments).toEqual([]);
    expect(records.audit.map((a) => [a.reason, a.turn.finish_reason, Array.from(a.turn.completion_ids)])).toEqual([["aborted", "abort", [9707]]]);
    // A response that never finished is still told about, timed to its connection's close.
    const gone = requestEnds.find((e) => e.session_id === "gone");
    expect(gone).toMatchObject({ path: "/v1/messages", status: 200 });
    expect(gone!.duration_ms).toBeGreaterThan(0);
  });

  it("reports an engine failure as a 500 in the API's shape and keeps the session usable", async () => {
    let calls = 0;
    const scripted = scriptedEngine(qwen3(), () => ({ text: "recovered" }));
    const flaky: EngineClient = {
      name: "flaky",
      generate(req, signal) {
        if (calls++ === 0) throw new EngineError("flaky", "CUDA out of memory");
        return scripted.generate(req, signal);
      },
      close: async () => {},
    };
    proxy = await startProxy(flaky);
    const s = proxy.createSession("f");
    const r = await post(s, "/v1/messages", an("x"), { "x-api-key": s.secret });
    expect(r).toMatchObject({ status: 500, body: { type: "error", error: { type: "api_error" } } });
    expect(String((r.body["error"] as { message: string }).message)).toContain("CUDA out of memory");
    const ok = await post(s, "/v1/messages", an("x"), { "x-api-key": s.secret });
    expect(ok).toMatchObject({ status: 200, body: { content: [{ type: "text", text: "recovered" }] } });
    expect(proxy.closeSession("f").audit.map((a) => a.reason)).toEqual(["error"]);
  });
});

describe("requests the engine cannot serve as asked get a 400 the harness can act on, never a 5xx", () => {
  const long = "Please summarise this. ".repeat(20);
  /** Tokens of the prompt a one-user-message request renders to. */
  const promptTokens = (content: string) => qwen3().tokenizer.encode(qwen3().template.render([{ role: "user", content }], [], { addGenerationPrompt: true })).length;

  it("refuses a prompt over the context window in each API's words, streaming or not", async () => {
    const window = 64;
    const n = promptTokens(long);
    expect(n).toBeGreaterThan(window);
    const engine = scriptedEngine(qwen3(), () => ({ text: "never" }), { contextWindow: window });
    proxy = await startProxy(engine);
    const s = proxy.createSession("w");
    const anthropic = new Anthropic({ baseURL: s.baseUrl, apiKey: s.secret, maxRetries: 0 });
    for (const stream of [false, true]) {
      const err = await anthropic.messages.create({ model: MODEL_NAME, max_tokens: 5, stream, messages: [{ role: "user", content: long }] }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(Anthropic.BadRequestError);
      expect((err as InstanceType<typeof Anthropic.BadRequestError>).error).toEqual({
        type: "error",
        error: { type: "invalid_request_error", message: `prompt is too long: ${n} tokens > ${window - 1} maximum` },
      });
    }
    const openai = new OpenAI({ baseURL: `${s.baseUrl}/v1`, apiKey: s.secret, maxRetries: 0 });
    const chatErr = await openai.chat.completions.create({ model: MODEL_NAME, stream: true, messages: [{ role: "user", content: long }] }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(chatErr).toBeInstanceOf(OpenAI.BadRequestError);
    expect(chatErr).toMatchObject({ status: 400, code: "context_length_exceeded", param: "messages", type: "invalid_request_error" });
    expect((chatErr as Error).message).toContain(`maximum context length is ${window} tokens. However, your messages resulted in ${n} tokens`);
    const responses = await post(s, "/v1/responses", JSON.stringify({ model: MODEL_NAME, input: long }));
    expect(responses).toMatchObject({ status: 400, body: { error: { type: "invalid_request_error", param: "input", code: "context_length_exceeded" } } });
    // Nothing reached the engine, and the session still serves a prompt that fits.
    expect(engine.callCount).toBe(0);
    expect(await post(s, "/v1/messages", an("hi"), { "x-api-key": s.secret })).toMatchObject({ status: 200 });
  });

  it("maps the engine's own refusal of a prompt over its context to the same 400, and audits it as rejected", async () => {
    const window = 64;
    const engine = scriptedEngine(qwen3(), () => ({ text: "never" }), { contextWindow: window, reportsContextWindow: false });
    // A proxy that knows no window of its own: the engine's typed refusal is all it has.
    proxy = await startProxy(engine, { model: { ...qwen3(), contextWindow: null } });
    const s = proxy.createSession("e");
    const r = await post(s, "/v1/messages", JSON.stringify({ model: MODEL_NAME, max_tokens: 5, messages: [{ role: "user", content: long }] }), { "x-api-key": s.secret });
    expect(r).toEqual({ status: 400, body: { type: "error", error: { type: "invalid_request_error", message: `prompt is too long: ${promptTokens(long)} tokens > ${window - 1} maximum` } } });
    expect(proxy.closeSession("e").audit.map((a) => a.reason)).toEqual(["rejected"]);
  });

  it("refuses top_p 0 and a seed beyond 2^53 itself, and an engine's refusal of a sampling setting with a 400 naming it", async () => {
    const scripted = scriptedEngine(qwen3(), () => ({ text: "ok" }));
    const picky: EngineClient = {
      name: "picky",
      generate(req, signal) {
        if (req.sampling.temperature > 1.5) throw new EngineError("picky", "temperature must be at most 1.5", { rejection: { field: "sampling.temperature" } });
        return scripted.generate(req, signal);
      },
      close: async () => {},
    };
    proxy = await startProxy(picky);
    const s = proxy.createSession("p");
    const chat = (extra: Record<string, unknown>) => post(s, "/v1/chat/completions", JSON.stringify({ model: MODEL_NAME, messages: [{ role: "user", content: "x" }], ...extra }));
    expect(await chat({ top_p: 0 })).toEqual({
      status: 400,
      body: { error: { message: "top_p: must be in (0, 1]; for greedy decoding set temperature to 0", type: "invalid_request_error", param: "top_p", code: null } },
    });
    expect(await chat({ seed: 2 ** 53 })).toMatchObject({ status: 400, body: { error: { param: "seed" } } });
    expect(await chat({ temperature: 1.9 })).toEqual({
      status: 400,
      body: { error: { message: "temperature: refused by the engine: picky engine: temperature must be at most 1.5", type: "invalid_request_error", param: "temperature", code: null } },
    });
    const m = await post(s, "/v1/messages", JSON.stringify({ model: MODEL_NAME, max_tokens: 5, top_p: 0, messages: [{ role: "user", content: "x" }] }), { "x-api-key": s.secret });
    expect(m).toMatchObject({ status: 400, body: { type: "error", error: { type: "invalid_request_error" } } });
    expect(await chat({ seed: 2 ** 53 - 1, top_p: 0.5 })).toMatchObject({ status: 200 });
  });

  it("asks the engine for no more tokens than the window has left", async () => {
    const n = promptTokens("x");
    const scripted = scriptedEngine(qwen3(), () => ({ text: "a reply much longer than three tokens" }));
    const asked: number[] = [];
    const recording: EngineClient = {
      name: "recording",
      generate(req, signal) {
        asked.push(req.sampling.max_tokens);
        return scripted.generate(req, signal);
      },
      contextWindow: async () => n + 3,
      close: async () => {},
    };
    proxy = await startProxy(recording);
    const s = proxy.createSession("m");
    const r = await post(s, "/v1/chat/completions", JSON.stringify({ model: MODEL_NAME, max_tokens: 100, messages: [{ role: "user", content: "x" }] }));
    expect(r).toMatchObject({ status: 200, body: { choices: [{ finish_reason: "length" }], usage: { prompt_tokens: n, completion_tokens: 3 } } });
    expect(asked).toEqual([3]);
  });
});

describe("a body far over the context window", () => {
  it("is refused from a tokenized prefix, without tokenizing the rest, with an estimate of its length", async () => {
    // 20 MB of lines that tokenize independently ("\n" then a letter is a piece boundary), so the true count is known.
    const line = "const alpha = beta(gamma, 42);\n";
    const lines = Math.ceil(20e6 / line.length);
    const perLine = qwen3().tokenizer.encode(line).length;
    const content = line.repeat(lines);
    const tokenizer = qwen3().tokenizer;
    const encodeInto = tokenizer.encodeInto.bind(tokenizer);
    let tokenizedChars = 0;
    tokenizer.encodeInto = (text, out, options) => {
      tokenizedChars += text.length;
      encodeInto(text, out, options);
    };
    try {
      proxy = await startProxy(scriptedEngine(qwen3(), () => ({ text: "never" })), { contextWindow: 32768, maxBodyBytes: 64 * 1024 * 1024 });
      const s = proxy.createSession("big");
      const r = await post(s, "/v1/messages", JSON.stringify({ model: MODEL_NAME, max_tokens: 5, messages: [{ role: "user", content }] }), { "x-api-key": s.secret });
      expect(r.status).toBe(400);
      const m = /^prompt is too long: (\d+) tokens > 32767 maximum$/.exec((r.body["error"] as { message: string }).message);
      expect(m).not.toBeNull();
      expect(Math.abs(Number(m![1]) - lines * perLine) / (lines * perLine)).toBeLessThan(0.01);
      // A few times the window's worth of text, not the 20 MB.
      expect(tokenizedChars).toBeLessThan(8 * 32768 + 1024);
    } finally {
      tokenizer.encodeInto = encodeInto;
    }
  });
});
