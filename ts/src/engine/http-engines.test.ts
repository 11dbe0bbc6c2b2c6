/**
 * The vLLM and SGLang clients against a local HTTP server that records each
 * request and answers with handwritten responses in each server's format.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { SglangEngine } from "./sglang.ts";
import { EngineAbortedError, EngineError, type EngineClient, type GenerateChunk, type GenerateRequest } from "./types.ts";
import { VllmEngine } from "./vllm.ts";

type Handler = (body: Record<string, unknown>, req: IncomingMessage, res: ServerResponse) => void;
let server: Server | null = null;
afterEach(async () => {
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r) ?? r(null));
  server = null;
});

async function serve(handler: Handler): Promise<{ url: string; bodies: Array<Record<string, unknown>> }> {
  const bodies: Array<Record<string, unknown>> = [];
  server = createServer((req, res) => {
    let text = "";
    req.on("data", (d) => (text += d));
    req.on("end", () => {
      const body = JSON.parse(text) as Record<string, unknown>;
      bodies.push({ path: req.url, ...body });
      handler(body, req, res);
    });
  });
  await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bodies };
}

const request: GenerateRequest = { request_id: "r1", prompt_ids: [1, 2, 3], sampling: { temperature: 1, top_p: 1, max_tokens: 16, stop_token_ids: [151645], seed: 7 } };

async function collect(engine: EngineClient, signal?: AbortSignal): Promise<GenerateChunk[]> {
  const out: GenerateChunk[] = [];
  for await (const c of engine.generate(request, signal)) out.push(c);
  return out;
}

const vllmChunk = (tokens: number[], lps: number[], finish: string | null, extra: Record<string, unknown> = {}) =>
  `data: ${JSON.stringify({ id: "cmpl-1", object: "text_completion", choices: [{ index: 0, text: "x", logprobs: { tokens: tokens.map((t) => `token_id:${t}`), token_logprobs: lps, top_logprobs: null, text_offset: [] }, finish_reason: finish, ...extra }] })}\n\n`;

describe("vLLM client", () => {
  it("sends token ids and streams sampled ids with their logprobs", async () => {
    const { url, bodies } = await serve((_b, _req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(vllmChunk([9707, 11], [-0.25, -1.5], null) + vllmChunk([151645], [-0.125], "stop") + "data: [DONE]\n\n");
    });
    const chunks = await collect(new VllmEngine({ baseUrl: url, model: "m", policyVersion: () => 4 }));
    expect(chunks).toEqual([
      { token_ids: [9707, 11], logprobs: [-0.25, -1.5], routing: null, policy_version: 4, finish_reason: null },
      { token_ids: [151645], logprobs: [-0.125], routing: null, policy_version: 4, finish_reason: "stop" },
    ]);
    expect(bodies[0]).toMatchObject({ path: "/v1/completions", model: "m", prompt: [1, 2, 3], max_tokens: 16, seed: 7, stop_token_ids: [151645], logprobs: 1, return_tokens_as_token_ids: true, stream: true });
  });

  it("reads routed_experts [gen_len, layers, top_k] and yields one routed chunk", async () => {
    const { url } = await serve((_b, _req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(vllmChunk([5], [-1], null) + vllmChunk([6], [-2], "length", { routed_experts: [[[1, 2], [3, 4]], [[5, 6], [7, 8]]] }) + "data: [DONE]\n\n");
    });
    const [chunk, ...rest] = await collect(new VllmEngine({ baseUrl: url, model: "m", routing: true }));
    expect(rest).toEqual([]);
    expect(chunk).toEqual({ token_ids: [5, 6], logprobs: [-1, -2], routing: Uint8Array.from([1, 2, 3, 4, 5, 6, 7, 8]), policy_version: 0, finish_reason: "length" });
  });

  it("turns an HTTP error into an EngineError naming the status", async () => {
    const { url } = await serve((_b, _req, res) => res.writeHead(400).end('{"error":"prompt too long"}'));
    await expect(collect(new VllmEngine({ baseUrl: url, model: "m" }))).rejects.toThrow(/answered 400: \{"error":"prompt too long"\}/);
  });

  it("aborts the HTTP request when the signal fires", async () => {
    let closed!: () => void;
    const serverSawClose = new Promise<void>((r) => (closed = r));
    const { url } = await serve((_b, req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(vllmChunk([1], [-1], null));
      res.once("close", () => closed());
    });
    const ac = new AbortController();
    const it = new VllmEngine({ baseUrl: url, model: "m" }).generate(request, ac.signal)[Symbol.asyncIterator]();
    expect((await it.next()).value).toMatchObject({ token_ids: [1] });
    ac.abort();
    await expect(it.next()).rejects.toBeInstanceOf(EngineAbortedError);
    await serverSawClose;
  });
});

function int32Base64(values: number[]): string {
  const b = Buffer.alloc(values.length * 4);
  values.forEach((v, i) => b.writeInt32LE(v, i * 4));
  return b.toString("base64");
}

describe("SGLang client", () => {
  it("sends input_ids and reads logprobs and (seq_len - 1, L, K) routing", async () => {
    // prompt 3 tokens + 2 sampled = 5 tokens -> 4 rows of L=1, K=2.
    const routed = [10, 11, 12, 13, 14, 15, 16, 17];
    const { url, bodies } = await serve((_b, _req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          text: "hi",
          output_ids: [9707, 151645],
          meta_info: { id: "r1", finish_reason: { type: "stop", matched: 151645 }, prompt_tokens: 3, completion_tokens: 2, output_token_logprobs: [[-0.5, 9707, null], [-0.25, 151645, null]], routed_experts: int32Base64(routed) },
        }),
      );
    });
    const [chunk] = await collect(new SglangEngine({ baseUrl: url, routing: { layers: 1, topK: 2 }, policyVersion: () => 2 }));
    expect(bodies[0]).toMatchObject({ path: "/generate", rid: "r1", input_ids: [1, 2, 3], return_logprob: true, return_routed_experts: true, sampling_params: { max_new_tokens: 16, stop_token_ids: [151645], no_stop_trim: true } });
    expect(chunk).toEqual({
      token_ids: [9707, 151645],
      logprobs: [-0.5, -0.25],
      policy_version: 2,
      finish_reason: "stop",
      prompt_routing: Uint8Array.from([10, 11, 12, 13, 14, 15]),
      // Row of the first sampled token fed back as input; the last one was never fed back.
      routing: Uint8Array.from([16, 17, 0, 0]),
      routing_recorded: Uint8Array.from([1, 0]),
    });
  });

  it("rejects routing of the wrong size", async () => {
    const { url } = await serve((_b, _req, res) => {
      res.writeHead(200).end(JSON.stringify({ meta_info: { finish_reason: { type: "length" }, output_token_logprobs: [[-1, 5, null]], routed_experts: int32Base64([1, 2]) } }));
    });
    await expect(collect(new SglangEngine({ baseUrl: url, routing: { layers: 2, topK: 2 } }))).rejects.toBeInstanceOf(EngineError);
  });
});
