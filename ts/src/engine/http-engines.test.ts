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
async function stopServer(): Promise<void> {
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r) ?? r(null));
  server = null;
}
afterEach(stopServer);

async function serve(handler: Handler): Promise<{ url: string; bodies: Array<Record<string, unknown>> }> {
  const bodies: Array<Record<string, unknown>> = [];
  server = createServer((req, res) => {
    let text = "";
    req.on("data", (d) => (text += d));
    req.on("end", () => {
      const body = (text === "" ? {} : JSON.parse(text)) as Record<string, unknown>;
      bodies.push({ path: req.url, ...body });
      handler(body, req, res);
    });
  });
  await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, bodies };
}

const request: GenerateRequest = { request_id: "r1", prompt_ids: [1, 2, 3], sampling: { temperature: 1, top_p: 1, max_tokens: 16, stop_token_ids: [151645], seed: 7 } };

function int32Bytes(values: number[]): Buffer {
  const b = Buffer.alloc(values.length * 4);
  values.forEach((v, i) => b.writeInt32LE(v, i * 4));
  return b;
}

function int32Base64(values: number[]): string {
  return int32Bytes(values).toString("base64");
}

/** A version-1 .npy image of little-endian int32 values (what numpy.save writes). */
function npyBase64(values: number[], shape: number[]): string {
  let header = `{'descr': '<i4', 'fortran_order': False, 'shape': (${shape.join(", ")}), }`;
  header += " ".repeat(63 - ((10 + header.length) % 64)) + "\n";
  const head = Buffer.alloc(10);
  head.write("\x93NUMPY", 0, "latin1");
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  return Buffer.concat([head, Buffer.from(header, "latin1"), int32Bytes(values)]).toString("base64");
}

async function collect(engine: EngineClient, signal?: AbortSignal): Promise<GenerateChunk[]> {
  const out: GenerateChunk[] = [];
  for await (const c of engine.generate(request, signal)) out.push(c);
  return out;
}

const vllmChunk = (tokens: number[], lps: number[], finish: string | null, extra: Record<string, unknown> = {}) =>
  `data: ${JSON.stringify({ id: "cmpl-1", object: "text_completion", choices: [{ index: 0, text: "x", logprobs: { tokens: tokens.map((t) => `token_id:${t}`), token_logprobs: lps, top_logprobs: null, text_offset: [] }, finish_reason: finish, ...extra }] })}\n\n`;

// Both servers answer prompt [1, 2, 3] with [9707, 151645] and routing rows for prompt 3 +
// completion 2 - 1 = 4 tokens of layers 1 x top_k 2.
const routedRows = [10, 11, 12, 13, 14, 15, 16, 17];
const routedChunk = (policyVersion: number): GenerateChunk => ({
  token_ids: [9707, 151645],
  logprobs: [-0.5, -0.25],
  policy_version: policyVersion,
  finish_reason: "stop",
  prompt_routing: Uint8Array.from([10, 11, 12, 13, 14, 15]),
  // The first sampled token's row (fed back as input); the last one was never fed back.
  routing: Uint8Array.from([16, 17, 0, 0]),
  routing_recorded: Uint8Array.from([1, 0]),
});

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

  it("sends the whole prompt on every call of a conversation, however it changed since the last one, over one kept-alive connection", async () => {
    const ports = new Set<number>();
    const { url, bodies } = await serve((_b, req, res) => {
      ports.add(req.socket.remotePort!);
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(vllmChunk([151645], [-0.125], "stop") + "data: [DONE]\n\n");
    });
    const engine = new VllmEngine({ baseUrl: url, model: "m" });
    const buffer = new Int32Array(16);
    const prompts = [[5, 6, 7], [5, 6, 7, 8, 9], [5, 60, 7, 8, 9, 10], [5, 60], [1000000, 60, 7]];
    for (const [i, p] of prompts.entries()) {
      buffer.set(p); // the proxy reuses one buffer per thread
      for await (const _ of engine.generate({ ...request, request_id: `s/turn-${i}`, prompt_ids: buffer.subarray(0, p.length), prefix_key: "s/thread-0" }));
    }
    expect(bodies.map((b) => b["prompt"])).toEqual(prompts);
    // Each stream was read to its end, so the client's pool reused the socket instead of destroying it.
    expect(ports.size).toBe(1);
  });

  it("closes the connection when its consumer stops before the finish, so the server can abort", async () => {
    let closed!: () => void;
    const serverSawClose = new Promise<void>((r) => (closed = r));
    const { url } = await serve((_b, _req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(vllmChunk([1], [-1], null));
      res.once("close", () => closed());
    });
    for await (const chunk of new VllmEngine({ baseUrl: url, model: "m" }).generate(request)) {
      expect(chunk.token_ids).toEqual([1]);
      break;
    }
    await expect(Promise.race([serverSawClose.then(() => "closed"), new Promise((r) => setTimeout(r, 5000, "still open"))])).resolves.toBe("closed");
  });

  // vLLM's /v1/completions puts routed_experts only on the non-streaming choice: base64 of the
  // scheduler's int32 (num_tokens - 1, layers, top_k) = every prompt token and every sampled
  // token but the last (docs/proxy.md "vLLM routed experts").
  const vllmRoutedResponse = (routedExperts: unknown, finish = "stop") =>
    JSON.stringify({
      id: "cmpl-1",
      object: "text_completion",
      created: 0,
      model: "m",
      choices: [{ index: 0, text: "hi", logprobs: { text_offset: [0, 2], token_logprobs: [-0.5, -0.25], tokens: ["token_id:9707", "token_id:151645"], top_logprobs: [null, null] }, finish_reason: finish, stop_reason: null, prompt_logprobs: null, routed_experts: routedExperts }],
      usage: { prompt_tokens: 3, total_tokens: 5, completion_tokens: 2 },
    });
  const expectedRouted = routedChunk(3);

  it("with routing, asks for a non-streaming response and splits base64 int32 routed_experts into prompt and completion rows", async () => {
    const { url, bodies } = await serve((_b, _req, res) => res.writeHead(200, { "content-type": "application/json" }).end(vllmRoutedResponse(int32Base64(routedRows))));
    const chunks = await collect(new VllmEngine({ baseUrl: url, model: "m", routing: true, policyVersion: () => 3 }));
    expect(bodies[0]).toMatchObject({ path: "/v1/completions", prompt: [1, 2, 3], logprobs: 1, return_tokens_as_token_ids: true, stream: false });
    expect(chunks).toEqual([expectedRouted]);
  });

  it("reads routed_experts sent as a base64 .npy image and as nested arrays", async () => {
    for (const form of [npyBase64(routedRows, [4, 1, 2]), [[[10, 11]], [[12, 13]], [[14, 15]], [[16, 17]]]]) {
      const { url } = await serve((_b, _req, res) => res.writeHead(200, { "content-type": "application/json" }).end(vllmRoutedResponse(form)));
      expect(await collect(new VllmEngine({ baseUrl: url, model: "m", routing: true, policyVersion: () => 3 }))).toEqual([expectedRouted]);
      await stopServer();
    }
  });

  it("rejects routed_experts with the wrong row count or none at all", async () => {
    for (const form of [int32Base64([1, 2, 3, 4, 5, 6]), undefined]) {
      const { url } = await serve((_b, _req, res) => res.writeHead(200, { "content-type": "application/json" }).end(vllmRoutedResponse(form)));
      await expect(collect(new VllmEngine({ baseUrl: url, model: "m", routing: true }))).rejects.toBeInstanceOf(EngineError);
      await stopServer();
    }
  });

  it("turns an HTTP error into an EngineError naming the status", async () => {
    const { url } = await serve((_b, _req, res) => res.writeHead(400).end('{"error":"prompt too long"}'));
    await expect(collect(new VllmEngine({ baseUrl: url, model: "m" }))).rejects.toThrow(/answered 400: \{"error":"prompt too long"\}/);
  });

  it("reads the context window from the served model's max_model_len unless the config names one", async () => {
    const { url, bodies } = await serve((_b, _req, res) =>
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ object: "list", data: [{ id: "other", max_model_len: 8192 }, { id: "m", object: "model", max_model_len: 32768 }] })),
    );
    expect(await new VllmEngine({ baseUrl: url, model: "m" }).contextWindow()).toBe(32768);
    expect(await new VllmEngine({ baseUrl: url, model: "unlisted" }).contextWindow()).toBeNull();
    expect(await new VllmEngine({ baseUrl: url, model: "m", contextWindow: 4096 }).contextWindow()).toBe(4096);
    expect(bodies.map((b) => b["path"])).toEqual(["/v1/models", "/v1/models"]);
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


describe("SGLang client", () => {
  it("sends input_ids and reads logprobs and (seq_len - 1, L, K) routing", async () => {
    const { url, bodies } = await serve((_b, _req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          text: "hi",
          output_ids: [9707, 151645],
          meta_info: { id: "r1", finish_reason: { type: "stop", matched: 151645 }, prompt_tokens: 3, completion_tokens: 2, output_token_logprobs: [[-0.5, 9707, null], [-0.25, 151645, null]], routed_experts: int32Base64(routedRows) },
        }),
      );
    });
    const [chunk] = await collect(new SglangEngine({ baseUrl: url, routing: { layers: 1, topK: 2 }, policyVersion: () => 2 }));
    expect(bodies[0]).toMatchObject({ path: "/generate", rid: "r1", input_ids: [1, 2, 3], return_logprob: true, return_routed_experts: true, sampling_params: { max_new_tokens: 16, stop_token_ids: [151645], no_stop_trim: true } });
    expect(chunk).toEqual(routedChunk(2));
  });

  it("rejects routing of the wrong size", async () => {
    const { url } = await serve((_b, _req, res) => {
      res.writeHead(200).end(JSON.stringify({ meta_info: { finish_reason: { type: "length" }, output_token_logprobs: [[-1, 5, null]], routed_experts: int32Base64([1, 2]) } }));
    });
    await expect(collect(new SglangEngine({ baseUrl: url, routing: { layers: 2, topK: 2 } }))).rejects.toBeInstanceOf(EngineError);
  });
});
