/**
 * Harnesses against the REAL Python engine: `python -m lego_rl.engine` serving
 * the tiny random MoE with the Qwen3 vocabulary (`python -m lego_rl.model.tiny
 * --tokenizer qwen3`), reached the way `lego eval --engine tcp://… --model-dir …`
 * reaches it (the registered harness factory), every harness (reference,
 * Claude Code, OpenCode, Codex CLI, OpenHands SDK, mini-swe-agent) in real
 * sandboxes through the real proxy. A random policy earns
 * nothing: each rollout must end as an agent outcome (ok or agent_error, never
 * env_error), within its bound, with no container left, and its segments must
 * carry the engine's own logprobs and MoE routing for every policy token.
 */
import { execFile, execFileSync } from "node:child_process";
import { promisify } from "node:util";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImage, fixtureImages, leftoverContainers } from "../sandbox/test-support.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import { REPO_ROOT } from "../repo-root.ts";
import { harnessLauncher, type AgentLauncher } from "../tasks/agents.ts";
import type { Task } from "../tasks/task.ts";
import { JsonLineProcess, PYTHON } from "../json-line-process.ts";
import { PolicyEngineError, RUNTIMES_DIR } from "./index.ts";

// Tiny model shape (lego_rl.model.tiny): 4 MoE layers, top-2 of 8 experts.
const ROUTING = { layers: 4, top_k: 2, num_experts: 8 };
const dir = mkdtempSync(join(tmpdir(), "lego-real-engine-"));
const modelDir = join(dir, "tiny-qwen3");
let engine: JsonLineProcess;
let address: string;
let fix: { task: TaskDefinition; image: string };

beforeAll(async () => {
  execFileSync(PYTHON, ["-m", "lego_rl.model.tiny", "--out", modelDir, "--tokenizer", "qwen3", "--seed", "0"], { cwd: REPO_ROOT, stdio: "ignore", timeout: 110_000 });
  engine = new JsonLineProcess("engine", PYTHON, ["-m", "lego_rl.engine", "--model", modelDir, "--bind", "tcp://127.0.0.1:*"]);
  address = (await engine.waitFor((e) => e.type === "listening", 60_000)).address as string;
  await fixtureImages();
  const f = await fixtureImage("fix-add");
  fix = { task: f.task, image: f.image.tag };
}, IMAGE_BUILD_TIMEOUT_MS);

afterAll(async () => {
  if (engine && engine.proc.exitCode === null) {
    const exited = new Promise((resolve) => engine.proc.once("exit", resolve));
    engine.proc.kill("SIGTERM");
    await exited;
  }
  expect(await leftoverContainers()).toEqual([]);
  rmSync(dir, { recursive: true, force: true });
});

const SAMPLING = { temperature: 1, maxTokensPerTurn: 24 };

async function rollouts(launcher: AgentLauncher, n: number, prefix: string) {
  const runner = await RolloutRunner.create({ ...launcher.runner, maxAttempts: 1, concurrency: n });
  try {
    return await Promise.all(Array.from({ length: n }, async (_, i) => {
      const agent = await launcher.start({} as Task, fix.task, `${prefix}-${i}`);
      const outcome = await runner.run({ ...fix, rolloutId: `${prefix}-${i}`, agent: agent.program, proxySocket: agent.proxySocket, engineFault: agent.engineFault, agentTimeoutSec: agent.agentTimeoutSec });
      const session = agent.session!();
      await agent.finish!(outcome);
      return { outcome, session };
    }));
  } finally {
    await runner.close();
  }
}

function expectEngineTokens(session: ReturnType<NonNullable<Awaited<ReturnType<AgentLauncher["start"]>>["session"]>>) {
  const main = session.segments.filter((s) => s.thread === "main");
  expect(main.length).toBeGreaterThanOrEqual(1);
  let policyTokens = 0;
  for (const s of session.segments) {
    const width = ROUTING.layers * ROUTING.top_k;
    expect(s.routing, "a MoE engine's segment carries routing").not.toBeNull();
    expect(s.routing!.length).toBe(s.token_ids.length * width);
    expect(Math.max(...s.routing!)).toBeLessThan(ROUTING.num_experts);
    for (let i = 0; i < s.token_ids.length; i++) {
      if (s.loss_mask[i] !== 1) continue;
      policyTokens += 1;
      // The engine's logprob of what it sampled: finite, ≤ 0, and at temperature 1 from a random
      // 151k-token policy far below 0 on average (checked over the segment below).
      expect(Number.isFinite(s.logprobs[i]!) && s.logprobs[i]! <= 0).toBe(true);
    }
    const lp = Array.from(s.logprobs).filter((_, i) => s.loss_mask[i] === 1);
    expect(lp.reduce((a, b) => a + b, 0) / lp.length).toBeLessThan(-1);
    // Every prompt token's routing came from the engine's prefill (recorded); of the sampled ones all but a turn's last.
    expect(s.routing_recorded!.filter((r) => r === 1).length).toBeGreaterThan(s.token_ids.length - s.turns.length - 1);
  }
  expect(policyTokens).toBeGreaterThan(0);
}

describe("harnesses against the real Python engine (tiny MoE, Qwen3 vocabulary)", () => {
  it("refuses an engine address without --model-dir, and a model dir whose tokenizer the engine's model does not cover", async () => {
    await expect(harnessLauncher({ harness: "reference", engine: address })).rejects.toThrow(/needs --model-dir/);
    const bytes = join(dir, "tiny-bytes");
    execFileSync(PYTHON, ["-m", "lego_rl.model.tiny", "--out", bytes, "--tokenizer", "bytes", "--seed", "0"], { cwd: REPO_ROOT, stdio: "ignore", timeout: 110_000 });
    const other = new JsonLineProcess("engine-bytes", PYTHON, ["-m", "lego_rl.engine", "--model", bytes, "--bind", "tcp://127.0.0.1:*"]);
    try {
      const otherAddress = (await other.waitFor((e) => e.type === "listening", 60_000)).address as string;
      const refused = harnessLauncher({ harness: "reference", engine: otherAddress, modelDir });
      await expect(refused).rejects.toBeInstanceOf(PolicyEngineError);
      await expect(refused).rejects.toThrow(/259 token ids.*151669-token tokenizer/);
    } finally {
      other.proc.kill("SIGTERM");
    }
  }, 180_000);

  it("reference harness: G=2 rollouts over one shared connection end as agent outcomes with the engine's logprobs and routing", async () => {
    const launcher = await harnessLauncher({ harness: "reference", engine: address, modelDir, sampling: SAMPLING, limits: { maxTurns: 3, timeoutSec: 120 } });
    try {
      expect(launcher.name).toBe("reference/zmq");
      expect(launcher.routing).toEqual(ROUTING);
      expect(launcher.samplingVersion!()).toBe(0);
      const done = await rollouts(launcher, 2, "ref-real");
      for (const { outcome, session } of done) {
        expect(["ok", "agent_error"]).toContain(outcome.status);
        expect(outcome.reward).toBe(0);
        expectEngineTokens(session);
        // Every turn stopped at the per-turn bound or at an end-of-turn: never more than it.
        for (const s of session.segments) for (const t of s.turns) expect(t.completion_end - t.completion_start).toBeLessThanOrEqual(SAMPLING.maxTokensPerTurn);
      }
    } finally {
      await launcher.close!();
    }
  }, 300_000);

  it("lego eval --engine tcp://… --model-dir …: the CLI reaches the same engine and reports agent outcomes", async () => {
    const lego = join(REPO_ROOT, "ts/bin/lego");
    const { stdout } = await promisify(execFile)(lego, [
      "eval", "--tasks", "easy:seed=7,count=1", "--harness", "reference", "--engine", address, "--model-dir", modelDir,
      "--max-tokens-per-turn", "16", "--max-turns", "2", "--k", "2", "--concurrency", "2",
    ], { timeout: 240_000, maxBuffer: 1 << 24 });
    const report = JSON.parse(stdout.trim().split("\n").at(-1)!) as { agent: string; rows: { status: string; reward: number }[] };
    expect(report.agent).toBe("reference/zmq");
    expect(report.rows).toHaveLength(2);
    for (const r of report.rows) {
      expect(["ok", "agent_error"]).toContain(r.status);
      expect(r.reward).toBe(0);
    }
  }, 300_000);

  // Every mounted harness, one rollout each, bounded by the sandbox's wall-clock limit and the
  // per-turn token bound, and where the harness's own turn limit holds against a model cut off at
  // that bound, by it. A random policy's 24 tokens are a plain answer cut at max tokens, never a
  // tool call; what each harness does with that (docs/harnesses.md, "Against a real engine"):
  //  - Claude Code continues a reply stopped at max_tokens (its output-limit recovery), so it makes
  //    more calls than --max-turns counts; OpenCode re-sends the same prompt after a `length`
  //    finish, its steps limit not counting those, until the wall clock ends it (timeout, an
  //    agent outcome); Codex CLI has no turn limit in exec and ends on the plain answer.
  //  - OpenHands SDK and mini-swe-agent stay within their turn limit.
  const MOUNTED: Array<{ harness: string; runtime: string; statuses: string[]; maxMainTurns?: number; wallS: number }> = [
    { harness: "claude-code", runtime: "harness/node_modules/@anthropic-ai/claude-code-linux-x64/claude", statuses: ["ok", "agent_error"], wallS: 150 },
    { harness: "opencode", runtime: "harness/node_modules/opencode-linux-x64/bin/opencode", statuses: ["ok", "agent_error", "timeout"], wallS: 120 },
    { harness: "codex", runtime: "harness/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex", statuses: ["ok", "agent_error"], wallS: 150 },
    // The SDK's imports from the read-only runtime take minutes on a loaded host (2 cores, load 40: none in 170 s).
    { harness: "openhands", runtime: "openhands/openhands/sdk", statuses: ["ok", "agent_error"], maxMainTurns: 3, wallS: 300 },
    { harness: "mini-swe-agent", runtime: "mini-swe-agent/minisweagent", statuses: ["ok", "agent_error"], maxMainTurns: 3, wallS: 150 },
  ];
  for (const { harness, runtime, statuses, maxMainTurns, wallS } of MOUNTED) {
    it(`${harness}: a rollout against the random policy ends as an agent outcome (${statuses.join(", ")}) within ${wallS} s, with the engine's logprobs and routing, no container left`, async () => {
      // scripts/setup builds the runtimes; a missing one fails here, never skips.
      expect(existsSync(join(RUNTIMES_DIR, runtime)), `no ${runtime} in ${RUNTIMES_DIR}: run scripts/setup`).toBe(true);
      const launcher = await harnessLauncher({ harness, engine: address, modelDir, sampling: SAMPLING, limits: { maxTurns: 3, timeoutSec: wallS } });
      try {
        const t0 = performance.now();
        const { outcome, session } = (await rollouts(launcher, 1, `${harness}-real`))[0]!;
        expect(statuses, `${harness}: ${outcome.status} ${outcome.envError?.message ?? ""} ${outcome.log}`).toContain(outcome.status);
        expect(outcome.reward ?? 0).toBe(0);
        // The sandbox's limit ends the agent stage (a little over it for the kill and the detectors), and the rollout soon after.
        expect(outcome.timingsMs.agent!).toBeLessThan((wallS + 15) * 1000);
        expect(performance.now() - t0).toBeLessThan((wallS + 90) * 1000);
        expectEngineTokens(session);
        for (const s of session.segments) for (const t of s.turns) expect(t.completion_end - t.completion_start).toBeLessThanOrEqual(SAMPLING.maxTokensPerTurn);
        const mainTurns = session.segments.filter((s) => s.thread === "main").flatMap((s) => s.turns).length;
        if (maxMainTurns !== undefined) expect(mainTurns).toBeLessThanOrEqual(maxMainTurns);
      } finally {
        await launcher.close!();
      }
      expect(await leftoverContainers()).toEqual([]);
    }, (wallS + 120) * 1000);
  }
});
