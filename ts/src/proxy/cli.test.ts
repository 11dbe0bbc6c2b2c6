/**
 * `lego proxy` as a user runs it: the real CLI process, its stdout session line,
 * an HTTP call, the records file while it serves and after SIGINT.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";
import { QWEN3_DIR } from "./test-support.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");

let dir: string | null = null;
let child: ChildProcess | null = null;
afterEach(async () => {
  if (child && child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((r) => child!.once("exit", r));
    child.kill("SIGKILL");
    await exited;
  }
  child = null;
  if (dir) rmSync(dir, { recursive: true, force: true });
  dir = null;
});

describe("lego proxy", () => {
  it("answers a usage error with one line on stderr and exit code 1, no stack trace", { timeout: 180_000 }, () => {
    for (const [args, line] of [
      [["--engine", "zmq"], "lego proxy: --engine zmq needs --engine-address (the endpoint python -m lego_rl.engine printed)"],
      [["--engine", "vllm"], "lego proxy: --engine vllm needs --engine-url"],
      [["--max-tokens", "0"], "lego proxy: --max-tokens must be a positive integer, got 0"],
    ] as const) {
      const r = spawnSync(LEGO, ["proxy", "--model-dir", QWEN3_DIR, ...args], { encoding: "utf8", timeout: 30_000 });
      expect({ status: r.status, stdout: r.stdout, stderr: r.stderr }).toEqual({ status: 1, stdout: "", stderr: `${line}\n` });
    }
    const missing = spawnSync(LEGO, ["proxy", "--model-dir", "/nonexistent/model"], { encoding: "utf8", timeout: 30_000 });
    expect(missing.status).toBe(1);
    expect(missing.stderr).toBe("lego proxy: model directory /nonexistent/model: cannot read tokenizer.json\n");
  });

  it("caps completions at --max-tokens and writes each turn to --records-out before answering, the session's records at exit", { timeout: 60_000 }, async () => {
    dir = mkdtempSync(join(tmpdir(), "lego-proxy-cli-"));
    const script = join(dir, "script.json");
    const out = join(dir, "records.jsonl");
    writeFileSync(script, JSON.stringify([{ text: "a reply of more than three tokens" }]));
    child = spawn(LEGO, ["proxy", "--model-dir", QWEN3_DIR, "--script", script, "--max-tokens", "3", "--records-out", out], { stdio: ["ignore", "pipe", "pipe"] });
    const exited = new Promise<number | null>((r) => child!.once("exit", (code) => r(code)));
    const first = await new Promise<string>((res, rej) => {
      createInterface({ input: child!.stdout! }).once("line", res);
      child!.once("exit", (code) => rej(new Error(`lego proxy exited with ${code} before printing its session`)));
    });
    const session = JSON.parse(first) as { session_id: string; base_url: string; secret: string };
    const res = await fetch(`${session.base_url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${session.secret}` },
      body: JSON.stringify({ model: "any", max_tokens: 100, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(await res.json()).toMatchObject({ choices: [{ finish_reason: "length" }], usage: { completion_tokens: 3 } });
    // Answered, so already on disk: a process killed now keeps the turn.
    const whileServing = readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(whileServing).toHaveLength(1);
    expect(whileServing[0]).toMatchObject({ type: "turn", session_id: session.session_id, outcome: "committed", turn: { finish_reason: "length" } });
    expect((whileServing[0]!["turn"] as { completion_ids: number[] }).completion_ids).toHaveLength(3);
    child.kill("SIGINT");
    expect(await exited).toBe(0);
    const lines = readFileSync(out, "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.map((l) => l["type"])).toEqual(["turn", "session"]);
    expect(lines[1]).toMatchObject({ type: "session", session_id: session.session_id, counters: { main_turns: 1 } });
  });
});
