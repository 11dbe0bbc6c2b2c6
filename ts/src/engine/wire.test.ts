/**
 * The engine client's Unix-socket wire (wire.ts): its framing, and ZmqEngine over
 * `unix://` against the real Python engine (`python -m lego_rl.engine --bind unix://…`),
 * compared token for token with the same model served over ZeroMQ.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MODEL_NAME, startProxy } from "../proxy/test-support.ts";
import { REPO_ROOT } from "../repo-root.ts";
import { EngineError, type GenerateChunk, type GenerateRequest } from "./types.ts";
import { FrameReader, frameBytes, MAX_HELD_FRAMES, MAX_STREAM_FRAME_BYTES, openWire } from "./wire.ts";
import { ZmqEngine } from "./zmq.ts";

const PYTHON = join(REPO_ROOT, ".venv/bin/python");
const MODEL = "tiny-bytes";

describe("FrameReader", () => {
  it("gives back every frame whole however the stream is cut, in order", () => {
    const frames = [new Uint8Array(0), Uint8Array.from([1, 2, 3]), new Uint8Array(70_000).map((_, i) => i % 251), Uint8Array.from([9])];
    const stream = Buffer.concat(frames.flatMap((f) => frameBytes(f)));
    for (const cut of [1, 2, 3, 5, 4096, stream.length]) {
      const got: number[][] = [];
      const reader = new FrameReader((f) => got.push(Array.from(f)));
      for (let i = 0; i < stream.length; i += cut) reader.push(stream.subarray(i, i + cut));
      expect(got).toEqual(frames.map((f) => Array.from(f)));
    }
  });

  it("refuses a length prefix no control frame has, naming it", () => {
    const reader = new FrameReader(() => undefined);
    const head = Buffer.alloc(4);
    head.writeUInt32BE(MAX_STREAM_FRAME_BYTES + 1);
    expect(() => reader.push(head)).toThrow(/frame length of 1073741825 bytes/);
  });

  it("an address of no known wire is refused with the forms it takes", () => {
    const events = { frame: () => undefined, connect: () => undefined, disconnect: () => undefined, failed: () => undefined };
    expect(() => openWire("http://127.0.0.1:1", events)).toThrow(/tcp:\/\/HOST:PORT or ipc:\/\/PATH \(ZeroMQ\) or unix:\/\/\/PATH/);
  });
});

describe("a Unix-socket wire whose engine is not there", () => {
  it("holds what is sent up to a bound, then refuses with the reason, and closes without waiting for the engine", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lego-wire-"));
    const events = { frame: () => undefined, connect: () => undefined, disconnect: () => undefined, failed: () => undefined };
    const wire = openWire(`unix://${join(dir, "nobody.sock")}`, events);
    try {
      for (let i = 0; i < MAX_HELD_FRAMES; i++) await wire.send(Uint8Array.from([i % 256]));
      await expect(wire.send(Uint8Array.from([1]))).rejects.toThrow(/not connected and already holds 1000 frames; is the engine running\?/);
    } finally {
      wire.close();
      rmSync(dir, { recursive: true, force: true });
    }
    await expect(wire.send(Uint8Array.from([1]))).rejects.toThrow(/closed/);
    expect(() => openWire("unix://relative.sock", events)).toThrow(/unix:\/\/\/PATH/);
  });

  it("a proxy call meets 503 engine unavailable, naming the address, in each API's shape", async () => {
    const dir = mkdtempSync(join(tmpdir(), "lego-wire-"));
    const address = `unix://${join(dir, "nobody.sock")}`;
    const engine = new ZmqEngine({ address, helloTimeoutMs: 300 });
    const proxy = await startProxy(engine);
    try {
      const s = proxy.createSession("s");
      const openai = new OpenAI({ baseURL: `${s.baseUrl}/v1`, apiKey: s.secret, maxRetries: 0 });
      const call = openai.chat.completions.create({ model: MODEL_NAME, messages: [{ role: "user", content: "hi" }] });
      await expect(call).rejects.toMatchObject({ status: 503, error: { type: "server_error" } });
      await expect(call).rejects.toThrow(/engine unavailable: zmq engine: no engine_info from unix:\/\/.*nobody.sock within 300 ms; is the engine running\?/);
      const anthropic = new Anthropic({ baseURL: s.baseUrl, apiKey: s.secret, maxRetries: 0 });
      await expect(anthropic.messages.create({ model: MODEL_NAME, max_tokens: 5, messages: [{ role: "user", content: "hi" }] })).rejects.toMatchObject({ status: 503 });
    } finally {
      await proxy.close();
      await engine.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("an engine client closed before its engine ever answered lets go at once", async () => {
    const client = new ZmqEngine({ address: "tcp://127.0.0.1:9", helloTimeoutMs: 60_000 });
    const call = collect(client.generate(request("never", [1], 1)));
    const t0 = performance.now();
    await client.close();
    await expect(call).rejects.toThrow(EngineError);
    expect(performance.now() - t0).toBeLessThan(2_000);
  });
});

/** `python -m lego_rl.engine` on `bind`; resolves with the address it printed. */
async function startEngine(modelDir: string, bind: string): Promise<{ proc: ChildProcess; address: string }> {
  const proc = spawn(PYTHON, ["-m", "lego_rl.engine", "--model", modelDir, "--bind", bind, "--max-context", "4096"], { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "inherit"] });
  const first = await new Promise<string>((resolve, reject) => {
    createInterface({ input: proc.stdout! }).once("line", resolve);
    proc.once("exit", (code) => reject(new Error(`engine on ${bind} exited with ${code} before listening`)));
  });
  return { proc, address: (JSON.parse(first) as { address: string }).address };
}

async function stop(proc: ChildProcess | undefined, signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
  if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
  const exited = new Promise((resolve) => proc.once("exit", resolve));
  proc.kill(signal);
  await exited;
}

const request = (id: string, prompt: number[], maxTokens: number): GenerateRequest => ({
  request_id: id, prompt_ids: Int32Array.from(prompt), sampling: { temperature: 0, top_p: 1, max_tokens: maxTokens, stop_token_ids: [], seed: null },
});

async function collect(stream: AsyncIterable<GenerateChunk>): Promise<GenerateChunk[]> {
  const chunks: GenerateChunk[] = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

describe("ZmqEngine over a Unix socket, against the Python engine", () => {
  let dir: string;
  let modelDir: string;
  let socketPath: string;
  let zmqEngine: { proc: ChildProcess; address: string } | undefined;
  let unixEngine: { proc: ChildProcess; address: string } | undefined;
  let early: ZmqEngine;
  let early1: Promise<GenerateChunk[]>;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "lego-unix-engine-"));
    modelDir = join(dir, MODEL);
    socketPath = join(dir, "engine.sock");
    execFileSync(PYTHON, ["-m", "lego_rl.model.tiny", "--out", modelDir, "--tokenizer", "bytes", "--seed", "0"], { cwd: REPO_ROOT, stdio: "ignore" });
    // A client made, and a call sent, before the engine listens: the wire holds it until it connects.
    early = new ZmqEngine({ address: `unix://${socketPath}`, model: MODEL });
    early1 = collect(early.generate(request("early-1", [...Buffer.from("Hello")], 6)));
    [zmqEngine, unixEngine] = await Promise.all([startEngine(modelDir, "tcp://127.0.0.1:*"), startEngine(modelDir, `unix://${socketPath}`)]);
  }, 120_000);

  afterAll(async () => {
    await early?.close();
    await Promise.all([stop(zmqEngine?.proc), stop(unixEngine?.proc)]);
    rmSync(dir, { recursive: true, force: true });
  });

  it("streams the same tokens, logprobs and routing as over ZeroMQ, including a call sent before the engine listened", async () => {
    expect(unixEngine!.address).toBe(`unix://${socketPath}`);
    const overZmq = new ZmqEngine({ address: zmqEngine!.address, model: MODEL });
    try {
      const want = await collect(overZmq.generate(request("z-1", [...Buffer.from("Hello")], 6)));
      const got = await early1;
      expect(got.map((c) => c.token_ids)).toEqual(want.map((c) => c.token_ids));
      expect(got.map((c) => c.logprobs)).toEqual(want.map((c) => c.logprobs));
      expect(Array.from(got.at(-1)!.routing!)).toEqual(Array.from(want.at(-1)!.routing!));
      expect(Array.from(got.at(-1)!.prompt_routing!)).toEqual(Array.from(want.at(-1)!.prompt_routing!));
      expect(got.at(-1)!.finish_reason).toBe("length");
    } finally {
      await overZmq.close();
    }
  }, 60_000);

  it("an engine that dies fails the call in flight at once; a restarted one is reached again", async () => {
    const client = new ZmqEngine({ address: `unix://${socketPath}`, model: MODEL, helloTimeoutMs: 60_000 });
    try {
      let tokens = 0;
      const run = (async () => {
        for await (const chunk of client.generate(request("dies-1", [1, 2, 3], 4000))) {
          tokens += chunk.token_ids.length;
          if (tokens === 1) void stop(unixEngine!.proc, "SIGKILL");
        }
      })();
      await expect(run).rejects.toThrow(EngineError);
      await expect(run).rejects.toThrow(/dropped/);
      expect(client.available()).toBe(false);
      unixEngine = await startEngine(modelDir, `unix://${socketPath}`);
      const again = await collect(client.generate(request("after-restart", [1, 2], 2)));
      expect(again.at(-1)!.finish_reason).toBe("length");
      expect(client.available()).toBe(true);
    } finally {
      await client.close();
    }
  }, 90_000);
});
