/**
 * How ZmqEngine ends a streamed call, whatever the engine's schema version: an engine
 * from 2.4 on leaves the last step's tokens to the GenerateResult (the client asks it to),
 * one before streams them all first; a result that does not extend what was streamed is an error.
 * A scripted engine over a Unix socket (the real wire and codec), so each shape is exact.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeControl, encodeControl, SCHEMA_VERSION, type ControlMessage } from "../schema/index.ts";
import { FrameReader, frameBytes } from "./wire.ts";
import { EngineError, type GenerateChunk } from "./types.ts";
import { ZmqEngine } from "./zmq.ts";

/** What the scripted engine streams before its result (every token, or all but the last step's), and which version sampled each. */
type Script = { streamed: number[]; result: number[]; versions: number[] };
const SCRIPTS: Record<string, Script> = {
  // A weight update landed before the last step: its token was sampled by version 1.
  "from-2.4": { streamed: [11, 12], result: [11, 12, 13], versions: [0, 0, 1] },
  "before-2.4": { streamed: [11, 12, 13], result: [11, 12, 13], versions: [0, 0, 0] },
  "differs": { streamed: [11, 12], result: [11, 99, 13], versions: [0, 0, 0] },
};

let dir: string;
let server: Server;
let engine: ZmqEngine;
const asked: Array<boolean | null | undefined> = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "lego-zmq-results-"));
  server = createServer((socket) => {
    const send = (m: ControlMessage) => socket.write(Buffer.concat(frameBytes(encodeControl(m))));
    const reader = new FrameReader((frame) => {
      const m = decodeControl(frame);
      if (m.kind === "engine_hello")
        send({ kind: "engine_info", model: "scripted", policy_version: 0, vocab_size: 256, max_context: 4096, moe_layers: 0, top_k: 0, num_experts: 0, active_requests: 0, schema_version: SCHEMA_VERSION });
      if (m.kind !== "generate") return;
      asked.push(m.final_tokens_in_result);
      const script = SCRIPTS[m.request_id]!;
      script.streamed.forEach((t, k) => send({ kind: "token_chunk", request_id: m.request_id, token_ids: Int32Array.of(t), logprobs: Float32Array.of(-t / 100), policy_version: script.versions[k]! }));
      send({
        kind: "generate_result", request_id: m.request_id, finish_reason: "stop", completion_token_ids: Int32Array.from(script.result),
        logprobs: Float32Array.from(script.result, (t) => -t / 100), prompt_routing: new Uint16Array(0), completion_routing: new Uint16Array(0),
        moe_layers: 0, top_k: 0, policy_version: Math.min(...script.versions), seed: 1, policy_versions: Int32Array.from(script.versions), cached_prompt_tokens: null,
      });
    });
    socket.on("data", (chunk: Buffer) => reader.push(chunk)).on("error", () => undefined);
  });
  await new Promise<void>((r) => server.listen(join(dir, "engine.sock"), r));
  engine = new ZmqEngine({ address: `unix://${join(dir, "engine.sock")}`, helloTimeoutMs: 10_000 });
});

afterAll(async () => {
  await engine?.close();
  await new Promise((r) => server?.close(r));
  rmSync(dir, { recursive: true, force: true });
});

async function call(id: string): Promise<GenerateChunk[]> {
  const chunks: GenerateChunk[] = [];
  const req = { request_id: id, prompt_ids: Int32Array.of(1, 2), sampling: { temperature: 0, top_p: 1, max_tokens: 8, stop_token_ids: [], seed: null } };
  for await (const c of engine.generate(req, AbortSignal.timeout(10_000))) chunks.push(c);
  return chunks;
}

describe("ZmqEngine's end of a streamed call", () => {
  it("asks for the last step's tokens in the result and yields them as a chunk of their own, with the version that sampled them", async () => {
    const chunks = await call("from-2.4");
    expect(asked.at(-1)).toBe(true);
    expect(chunks.map((c) => c.token_ids)).toEqual([[11], [12], [13], []]);
    expect(chunks.map((c) => c.policy_version)).toEqual([0, 0, 1, 0]); // the last chunk: the call's oldest
    expect(chunks[2]).toMatchObject({ finish_reason: null, logprobs: [Math.fround(-0.13)] });
    expect(chunks.at(-1)).toMatchObject({ finish_reason: "stop", logprobs: [] });
  });

  it("takes an engine before 2.4, which streamed every token, the same way: the last chunk adds none", async () => {
    const chunks = await call("before-2.4");
    expect(chunks.map((c) => c.token_ids)).toEqual([[11], [12], [13], []]);
    expect(chunks.flatMap((c) => c.token_ids)).toEqual([11, 12, 13]);
  });

  it("refuses a result whose tokens do not extend what was streamed, naming the request", async () => {
    await expect(call("differs")).rejects.toThrow(EngineError);
    await expect(call("differs")).rejects.toThrow(/request differs: result has 3 tokens but 2 were streamed, or they differ/);
  });
});
