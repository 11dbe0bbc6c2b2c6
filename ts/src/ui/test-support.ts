/**
 * A run folder for the UI's tests, written by the real components' writers: the trainer's
 * step-log line format (lego_rl.trainer.driver) and the sender's Spool with Arrow batches from
 * the real encoder. Also starts the real `lego ui` process and reads the URL it prints.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { appendFileSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import type { TextTokenizer } from "../proxy/index.ts";
import { synthetic, type RoutingShape, type Trajectory } from "../schema/index.ts";
import { encodeTrajectoryBatch, replicate, Spool, syntheticTrajectory } from "../transport/index.ts";

/** Debian's headless-capable Chromium; scripts/setup installs it (`chromium`). */
export const CHROMIUM = "/usr/bin/chromium";
export const LEGO = resolve(import.meta.dirname, "../../bin/lego");

const routing: RoutingShape = { layers: 2, top_k: 2, num_experts: 8 };
const tasks = ["fix-parser", "add-flag"];
const harnesses = ["reference", "claude-code"];

/** Four trajectories per batch over 2 tasks × 2 harnesses; the first is flagged, the last hit an env error. */
export function batchRows(seq: number, idPrefix = `b${seq}`): Trajectory[] {
  return replicate(syntheticTrajectory("t", 160, routing, 4, seq + 1), 4, idPrefix).map((t, i) => ({
    ...t, task_id: tasks[i % 2]!, harness: harnesses[Math.floor(i / 2)]!, reward: i === 3 ? null : (i % 2),
    status: i === 3 ? ("env_error" as const) : ("ok" as const), error: i === 3 ? "docker: container exited 137 before the agent started" : null,
    defense_flags: i === 0 ? ["grader_tampering"] : [],
  }));
}

export class RunFolder {
  readonly spool: Spool;
  constructor(readonly dir: string) {
    mkdirSync(join(dir, "spool"), { recursive: true });
    this.spool = new Spool(join(dir, "spool"));
  }

  /** One trainer step as the driver logs it; lr 0 trips the monitor's lr_zero. */
  step(step: number, lr = 1e-5): void {
    appendFileSync(join(this.dir, "steps.jsonl"), `${JSON.stringify({
      step, batch_id: `b-${step}`, policy_version: step, "optim/lr": lr, "optim/grad_norm": 0.4 + 0.01 * step,
      "mismatch/pearson_prob": 0.995 - 0.001 * step, "mismatch/k3_kl": 0.001 * step, "loss/clip_frac": 0.02,
      "batch/tokens": 6400, "time/step_s": 2, "batch/staleness_max": 0,
    })}\n`);
  }

  batch(seq: number, rows: Trajectory[] = batchRows(seq)): void {
    const { header, payload } = encodeTrajectoryBatch(rows, routing, { batchId: `batch-${seq}`, producerId: "worker-0", seq });
    this.spool.append(header, payload);
  }
}

/** `lego ui` as a user starts it; resolves with the printed URL (bounded by `timeoutMs`). */
export async function startLegoUi(args: string[], timeoutMs = 60_000): Promise<{ url: string; proc: ChildProcess; stderr: () => string }> {
  const proc = spawn(LEGO, ["ui", "--port", "0", ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let err = "";
  proc.stderr!.on("data", (d) => { err += d; });
  const url = await new Promise<string>((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`lego ui printed no URL in ${timeoutMs} ms; stderr: ${err}`)), timeoutMs);
    proc.once("exit", (code) => { clearTimeout(timer); fail(new Error(`lego ui exited ${code}: ${err}`)); });
    createInterface({ input: proc.stdout! }).on("line", (line) => {
      const m = /^lego ui: (http:\/\/\S+)$/.exec(line);
      if (m) { clearTimeout(timer); ok(m[1]!); }
    });
  });
  return { url, proc, stderr: () => err };
}

export async function stopLegoUi(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null) return;
  const exited = new Promise<void>((ok) => proc.once("exit", () => ok()));
  proc.kill("SIGTERM");
  await exited;
}

/** What the text trajectory's two turns say: context added before each turn, then the completion. */
export const TEXT_TURNS = [
  { context: "Fix the failing test in calc.py.\n", completion: '<tool_call>\n{"name": "bash", "arguments": {"cmd": "pytest -q"}}\n</tool_call>' },
  { context: "<tool_response>\n1 failed, 3 passed\n</tool_response>\n", completion: "The add() function subtracts; fixing it now." },
];

/** A trajectory whose tokens are real Qwen3 text: a tool call, its result, an answer. */
export function textTrajectory(id: string, tokenizer: TextTokenizer): Trajectory {
  const encoded = TEXT_TURNS.map((t) => ({ context: tokenizer.encode(t.context), completion: tokenizer.encode(t.completion), tail: tokenizer.encode("\n") }));
  const spec = {
    trajectory_id: id, group_id: `group-${id}`, task_id: "fix-calc", harness: "reference", status: "ok", reward: 1, attempt: 0, defense_flags: [], error: null,
    metrics: { turns: 2, tool_calls: 1, rereads_after_edit: 0, side_thread_turns: 0, rolled_back_turns: 0, wall_time_s: 3 },
    segments: [{ segment_id: `${id}-seg-0`, thread: "main", thread_id: "main", seal_reason: "finished", seed: 3,
      turns: encoded.map((e, i) => ({ turn_id: `${id}-turn-${i}`, prompt: e.context.length, completion: e.completion.length, tail: e.tail.length, policy_version: 2, finish_reason: "stop" })) }],
  } as unknown as Parameters<typeof synthetic.buildTrajectory>[0];
  const t = synthetic.buildTrajectory(spec, routing);
  t.segments[0]!.token_ids.set(encoded.flatMap((e) => [...e.context, ...e.completion, ...e.tail]));
  return t;
}
