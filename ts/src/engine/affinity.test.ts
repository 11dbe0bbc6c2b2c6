/**
 * Session affinity against two real Python engine servers (`python -m lego_rl.engine`,
 * tiny byte-tokenizer model): a session's turns stay where its prefix is cached, and
 * move when that replica is full or gone.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../repo-root.ts";
import { AffinityEngine, NoReplicaError } from "./affinity.ts";
import { EngineError, type GenerateChunk, type GenerateRequest } from "./types.ts";
import { ZmqEngine } from "./zmq.ts";

const PYTHON = join(REPO_ROOT, ".venv/bin/python");
const CHUNK = 128; // the engine's default prefill chunk: the prefix cache's unit

let dir: string;
const servers: ChildProcess[] = [];
let clients: ZmqEngine[];

async function startServer(modelDir: string): Promise<{ proc: ChildProcess; address: string }> {
  const proc = spawn(PYTHON, ["-m", "lego_rl.engine", "--model", modelDir, "--bind", "tcp://127.0.0.1:*"], {
    cwd: REPO_ROOT, stdio: ["ignore", "pipe", "inherit"],
  });
  servers.push(proc); // at once: afterAll must stop it even if set-up fails or times out
  const first = await new Promise<string>((resolve, reject) => {
    createInterface({ input: proc.stdout! }).once("line", resolve);
    proc.once("exit", (code) => reject(new Error(`engine exited with ${code} before listening`)));
  });
  return { proc, address: (JSON.parse(first) as { address: string }).address };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "lego-affinity-"));
  const modelDir = join(dir, "tiny-bytes");
  execFileSync(PYTHON, ["-m", "lego_rl.model.tiny", "--out", modelDir, "--tokenizer", "bytes", "--seed", "0"], { cwd: REPO_ROOT, stdio: "ignore" });
  const started = await Promise.all([startServer(modelDir), startServer(modelDir)]);
  clients = started.map((s) => new ZmqEngine({ address: s.address, clientId: "affinity-test" }));
  // Three cold Python starts (the model writer, then two servers at once): each `import torch` is
  // ~4 CPU-s, measured 35 s of wall time at load 11 on the 2-core CI host, so the default 120 s hook
  // budget (enough for zmq.test.ts's two) is not.
}, 300_000);

afterAll(async () => {
  await Promise.all(clients?.map((c) => c.close()) ?? []);
  for (const proc of servers) {
    if (proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise((resolve) => proc.once("exit", resolve));
      proc.kill("SIGKILL");
      await exited;
    }
  }
  rmSync(dir, { recursive: true, force: true });
});

function bytes(seed: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => (seed * 31 + i * 17 + ((i * i) % 7)) % 256);
}

function turn(session: string, k: number, prompt: number[], maxTokens: number): GenerateRequest {
  return { request_id: `${session}/turn-${k}`, prompt_ids: Int32Array.from(prompt), sampling: { temperature: 0, top_p: 1, max_tokens: maxTokens, stop_token_ids: [], seed: null } };
}

/** Runs a turn to its end: the completion and what the engine served from its prefix cache. */
async function run(router: AffinityEngine, req: GenerateRequest): Promise<{ completion: number[]; cached: number }> {
  const completion: number[] = [];
  let last: GenerateChunk | undefined;
  for await (const chunk of router.generate(req)) {
    completion.push(...chunk.token_ids);
    last = chunk;
  }
  return { completion, cached: last?.cached_prompt_tokens ?? -1 };
}

describe("AffinityEngine over two engine processes", () => {
  it("keeps a session's turns on the replica holding its prefix, and moves them when it is full or gone", async () => {
    const router = new AffinityEngine(clients, { maxInFlight: 1 });
    const history: Record<string, number[]> = { x: bytes(1, 300), y: bytes(2, 300), z: bytes(3, 300) };
    const next = async (session: string, k: number) => {
      const { completion, cached } = await run(router, turn(session, k, history[session]!, 6));
      const served = history[session]!.length;
      history[session] = [...history[session]!, ...completion, ...bytes(10 + k, 40)]; // + the tool's result
      return { cached, served };
    };

    // New sessions spread over the replicas; later turns follow them and reuse their prefix.
    expect((await next("x", 1)).cached).toBe(0);
    expect((await next("y", 1)).cached).toBe(0);
    expect((await next("z", 1)).cached).toBe(0);
    expect([router.homeOf("x"), router.homeOf("y"), router.homeOf("z")]).toEqual([0, 1, 0]);
    for (const session of ["x", "y", "z"]) {
      const { cached, served } = await next(session, 2);
      expect(cached).toBe(Math.floor(300 / CHUNK) * CHUNK); // turn 1's whole chunks, on the same replica
      expect(served).toBeGreaterThan(300);
    }
    expect([router.homeOf("x"), router.homeOf("y"), router.homeOf("z")]).toEqual([0, 1, 0]);

    // Replica 0 full (maxInFlight 1): z's long turn holds it, so x's next turn goes to replica 1, cold.
    const long = router.generate(turn("z", 3, history.z!, 20_000))[Symbol.asyncIterator]();
    expect((await long.next()).done).toBe(false); // z's turn is running on replica 0
    expect(router.load()).toEqual([1, 0]);
    expect((await next("x", 3)).cached).toBe(0);
    expect(router.homeOf("x")).toBe(1);
    await long.return!(undefined); // stop z's turn (the client aborts it in the engine)
    expect(router.load()).toEqual([0, 0]);
    expect((await next("x", 4)).cached).toBeGreaterThan(0); // x now lives on replica 1

    // Replica 1 gone: the turn running there fails at once, and its sessions' next turns go to replica 0.
    const stranded = router.generate(turn("y", 3, history.y!, 20_000))[Symbol.asyncIterator]();
    expect((await stranded.next()).done).toBe(false);
    const dropped = clients[1]!.untilDisconnected();
    servers[1]!.kill("SIGKILL");
    await dropped;
    await expect(stranded.next()).rejects.toThrow(EngineError);
    expect(clients[1]!.available()).toBe(false);
    expect((await next("y", 5)).cached).toBe(0); // replica 0 never saw y
    expect((await next("x", 5)).cached).toBe(2 * CHUNK); // x's first turns ran there: their chunks are still cached
    expect([router.homeOf("x"), router.homeOf("y")]).toEqual([0, 0]);
    expect((await next("z", 4)).cached).toBeGreaterThan(0); // z's home was never in doubt

    // With both gone, a turn fails with a typed error instead of waiting.
    const lone = new AffinityEngine([clients[1]!]);
    await expect(run(lone, turn("w", 1, bytes(4, 10), 2))).rejects.toThrow(NoReplicaError);
  }, 180_000);
});
