/**
 * `pnpm bench:harness`: what a rollout spends in the harness itself, per
 * registered harness, with the scripted-gold engine (so the model costs
 * nothing), beside the bare sandbox cycle.
 *   --harnesses a,b   harnesses measured (default: every one in HARNESS_TOOLS)
 *   --tasks SRC       task source (default easy:seed=99,count=2)
 *   --n N             rollouts per harness, round-robin over the tasks (default 2)
 * (`pnpm bench:harness --n 2 --harnesses reference,claude-code`)
 *
 * How it is measured (one rollout at a time, so nothing overlaps):
 *  - wall: the engine is wrapped; each model call's start and end are taken
 *    where the proxy hands it to the engine and the engine's last chunk (one
 *    clock, this process). start-up = agent stage start → first call; per turn
 *    = a reply's end → the next call (the harness's own work, its tool run
 *    included, and the proxy + forwarder both ways); exit = last reply → agent
 *    stage end (shutdown + the stage's detectors).
 *  - CPU: the agent container's cgroup CPU counter (cpuacct.usage, or cpu.stat
 *    usage_usec on cgroup v2), read when the container is handed out, at each
 *    call's start and end, and when it is discarded (frozen, before removal).
 *    Every process of the agent stage (the harness, its tools, the forwarder,
 *    our setup execs) is in that cgroup; host-side proxy and engine are not.
 *  - the bare sandbox cycle: the same tasks through the same RolloutRunner and
 *    proxy route with a no-op agent program (`true`): container start, setup,
 *    grading, removal of both containers. A harness's overhead is its agent
 *    stage's wall minus engine time minus the no-op's agent stage (a `docker
 *    exec` of `true` and the detectors): measured inside the stage, so the
 *    noise of container start and grading stays out; its whole rollout's
 *    cycle is reported beside it. Its CPU is its agent container's CPU minus
 *    the no-op's (start-up CPU likewise: from hand-out to the first call).
 * The last line is {"bench":"harness","reference_overhead_s":…}.
 */
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { benchFlags, BenchFlagError, positiveInt } from "../bench/index.ts";
import type { EngineClient } from "../engine/index.ts";
import { RolloutRunner } from "../rollout/index.ts";
import { ensureBaseImage, ensureTaskImage, type AgentSandbox, type Sandbox, type TaskDefinition } from "../sandbox/index.ts";
import { defaultTasksConfig, openTaskSource, type Task } from "../tasks/index.ts";
import { HARNESS_TOOLS, proxiedLauncher, scriptedHarnessEngine, type Harness, type ToolNames } from "./index.ts";

const flags = benchFlags({
  harnesses: { default: Object.keys(HARNESS_TOOLS).join(","), describe: "harnesses measured, comma-separated" },
  tasks: { default: "easy:seed=99,count=2", describe: "task source" },
  n: { default: "2", describe: "rollouts per harness" },
});
const n = positiveInt("n", flags.n);
const names = flags.harnesses!.split(",").map((s) => s.trim()).filter(Boolean);
for (const h of names) if (!HARNESS_TOOLS[h]) throw new BenchFlagError(`--harnesses: unknown harness ${JSON.stringify(h)} (registered: ${Object.keys(HARNESS_TOOLS).join(", ")})`);
const log = (s: string) => process.stderr.write(`${s}\n`);

/** The container's CPU seconds so far (cgroup v1 cgroupfs, or v2 systemd scope); NaN when unreadable. */
function containerCpuS(id: string): number {
  try {
    return Number(readFileSync(`/sys/fs/cgroup/cpuacct/docker/${id}/cpuacct.usage`, "utf8")) / 1e9;
  } catch {
    try {
      const stat = readFileSync(`/sys/fs/cgroup/system.slice/docker-${id}.scope/cpu.stat`, "utf8");
      return Number(/^usage_usec (\d+)/m.exec(stat)?.[1]) / 1e6;
    } catch {
      return NaN;
    }
  }
}

interface Call { start: number; end: number; cpuStart: number; cpuEnd: number }
/** What the current rollout's container did; one rollout at a time. */
let current: { id?: string; handedOut: number; cpu0: number; cpuEnd: number; removals: Promise<void>[]; calls: Call[] } | null = null;

/** The bench's runner: the same RolloutRunner, with its containers' CPU read as they come and go. */
class MeasuredRunner extends RolloutRunner {
  override async agent(image: string, rolloutId: string): Promise<AgentSandbox> {
    const t = performance.now();
    const box = await super.agent(image, rolloutId);
    if (current) Object.assign(current, { id: box.sandbox.id, handedOut: t, cpu0: containerCpuS(box.sandbox.id) });
    return box;
  }
  override discard(box: AgentSandbox | Sandbox): void {
    if (current && "sandbox" in box && box.sandbox.id === current.id) current.cpuEnd = containerCpuS(current.id);
    const remove = box.remove.bind(box);
    let done!: () => void;
    current?.removals.push(new Promise<void>((r) => (done = r)));
    box.remove = () => remove().finally(done);
    super.discard(box);
  }
}

/** The engine with each call's wall and container-CPU bounds noted. */
function timedEngine(engine: EngineClient): EngineClient {
  const cpu = () => (current?.id ? containerCpuS(current.id) : NaN);
  return {
    name: engine.name,
    ...(engine.contextWindow ? { contextWindow: () => engine.contextWindow!() } : {}),
    close: () => engine.close(),
    async *generate(req, signal) {
      const call: Call = { start: performance.now(), end: NaN, cpuStart: cpu(), cpuEnd: NaN };
      current?.calls.push(call);
      try {
        yield* engine.generate(req, signal);
      } finally {
        Object.assign(call, { end: performance.now(), cpuEnd: cpu() });
      }
    },
  };
}

/** The bare cycle: a program that does nothing and writes no record (its report says the record is absent). */
const NOOP: Harness = {
  name: "no-op", version: "-", runtimes: () => [], program: () => ({ script: "true" }),
  record: { file: { path: "/tmp/lego-no-op-record", maxBytes: 1 }, parse: () => ({ toolCalls: [], finalMessage: null, notes: [] }) },
  fileTools: { paths: [], shells: [] },
};

interface Rollout { status: string; reward: number | null; cycle: number; stage: number; engine: number; startup: number; turns: number[]; exit: number; cpu: number; startupCpu: number; turnCpu: number[]; calls: number }

async function rollouts(harness: Harness, tools: ToolNames, tasks: Array<{ task: Task; def: TaskDefinition; image: string }>): Promise<Rollout[]> {
  const launcher = proxiedLauncher({ harness, engineName: "scripted-gold", limits: { maxTurns: 8, timeoutSec: 300 }, engine: (model, def) => timedEngine(scriptedHarnessEngine("scripted-gold", model, def, tools)) });
  const runner = new MeasuredRunner({ maxAttempts: 1, concurrency: 1, ...launcher.runner });
  const out: Rollout[] = [];
  try {
    for (let i = 0; i < n; i++) {
      const { task, def, image } = tasks[i % tasks.length]!;
      const rolloutId = `bench-harness-${harness.name}-${i}`;
      const agent = await launcher.start(task, def, rolloutId);
      current = { handedOut: NaN, cpu0: NaN, cpuEnd: NaN, removals: [], calls: [] };
      const t0 = performance.now();
      const outcome = await runner.run({ task: def, image, rolloutId, agent: agent.program, proxySocket: agent.proxySocket, engineFault: agent.engineFault, agentTimeoutSec: agent.agentTimeoutSec });
      await agent.finish?.(outcome);
      // Both containers were discarded before run() returned; their removals end the cycle.
      await Promise.all(current.removals);
      const cycle = performance.now() - t0;
      const { calls, handedOut, cpu0, cpuEnd } = current;
      const stageStart = handedOut + (outcome.timingsMs.setup ?? 0);
      const stageEnd = stageStart + (outcome.timingsMs.agent ?? 0);
      const r: Rollout = {
        status: outcome.status, reward: outcome.reward, cycle, stage: outcome.timingsMs.agent ?? NaN, calls: calls.length,
        engine: calls.reduce((a, c) => a + (c.end - c.start), 0),
        startup: calls.length ? calls[0]!.start - stageStart : NaN,
        turns: calls.slice(1).map((c, k) => c.start - calls[k]!.end),
        exit: calls.length ? stageEnd - calls.at(-1)!.end : NaN,
        cpu: cpuEnd - cpu0,
        startupCpu: calls.length ? calls[0]!.cpuStart - cpu0 : NaN,
        turnCpu: calls.slice(1).map((c, k) => c.cpuStart - calls[k]!.cpuEnd),
      };
      log(`${harness.name} ${task.id}: ${r.status} reward ${r.reward}, cycle ${(cycle / 1000).toFixed(1)} s, ${r.calls} calls, container CPU ${r.cpu.toFixed(2)} s`);
      out.push(r);
    }
  } finally {
    current = null;
    await runner.close();
  }
  return out;
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);
const s = (ms: number) => Math.round(ms) / 1000;
const cpuS = (x: number) => Math.round(x * 1000) / 1000;

const load0 = loadavg()[0]!;
const utc = new Date().toISOString();
const base = await ensureBaseImage(undefined, log);
const set = await openTaskSource(flags.tasks!, defaultTasksConfig());
const tasks = [];
for (const task of set.tasks) {
  const def = await task.definition();
  tasks.push({ task, def, image: (await ensureTaskImage(def, base.tag, { log })).tag });
}
if (!tasks.length) throw new BenchFlagError(`--tasks ${flags.tasks}: no tasks`);

const noop = await rollouts(NOOP, { shell: { name: "bash", command: "command" } }, tasks);
const cycle = mean(noop.map((r) => r.cycle));
const noopStage = mean(noop.map((r) => r.stage));
const noopCpu = mean(noop.map((r) => r.cpu));
const figures: Record<string, unknown> = { bench: "harness" };
const per: Record<string, unknown> = {};
for (const name of names) {
  const key = name === "claude-code" ? "claude" : name.replace(/-/g, "_");
  const rs = await rollouts(HARNESS_TOOLS[name]!.harness, HARNESS_TOOLS[name]!.tools, tasks);
  // Within the agent stage, so the noise of container start and grading stays out of it.
  figures[`${key}_overhead_s`] = s(mean(rs.map((r) => r.stage - r.engine)) - noopStage);
  Object.assign(per, {
    [`${key}_cycle_s`]: s(mean(rs.map((r) => r.cycle))),
    [`${key}_startup_s`]: s(mean(rs.map((r) => r.startup))),
    [`${key}_per_turn_s`]: s(mean(rs.flatMap((r) => r.turns))),
    [`${key}_exit_s`]: s(mean(rs.map((r) => r.exit))),
    [`${key}_cpu_s`]: cpuS(mean(rs.map((r) => r.cpu)) - noopCpu),
    [`${key}_startup_cpu_s`]: cpuS(mean(rs.map((r) => r.startupCpu)) - noopCpu),
    [`${key}_per_turn_cpu_s`]: cpuS(mean(rs.flatMap((r) => r.turnCpu))),
    [`${key}_calls`]: mean(rs.map((r) => r.calls)),
    [`${key}_rewards`]: rs.map((r) => (r.status === "ok" ? r.reward : r.status)),
  });
}
Object.assign(figures, {
  sandbox_cycle_s: s(cycle),
  sandbox_agent_stage_s: s(noopStage),
  sandbox_cpu_s: cpuS(noopCpu),
  ...per,
  tasks: flags.tasks,
  n,
  load_start: Math.round(load0 * 10) / 10,
  load_end: Math.round(loadavg()[0]! * 10) / 10,
  utc,
});
process.stdout.write(`${JSON.stringify(figures)}\n`);
