/**
 * `lego eval`: every task run k times with one agent through the real
 * stages; a results table (task, status, reward, flags, time), a JSON report
 * with pass@1 and pass@k, and the tasks the agent solves sometimes but not
 * always — the only groups whose rewards differ, so the only ones GSPO learns
 * from — as a task list the rollout worker can read.
 */
import type { RolloutRunner } from "../rollout/index.ts";
import { ensureBaseImage, ensureTaskImage, isSandboxEnvError } from "../sandbox/index.ts";
import type { AgentLauncher } from "./agents.ts";
import { safeName } from "./materialize.ts";
import { runRollout, type RolloutSummary } from "./health.ts";
import type { TaskList } from "./sources.ts";
import type { Task } from "./task.ts";

export interface EvalRow extends RolloutSummary {
  task: string;
  /** 1-based attempt of k. */
  sample: number;
}

export interface TaskScore {
  task: string;
  /** Graded samples (env_error ones are left out: they say nothing about the agent). */
  n: number;
  /** Samples with reward 1. */
  c: number;
  pass1: number;
  passK: number;
}

export interface EvalReport {
  source: string;
  agent: string;
  k: number;
  tasks: number;
  rows: EvalRow[];
  scores: TaskScore[];
  /** Mean over tasks with at least one graded sample. */
  pass1: number;
  passK: number;
  statuses: Record<string, number>;
  /** Tasks solved in some but not all graded samples. */
  mixed: string[];
  wallMs: number;
}

/**
 * Unbiased pass@k from n samples with c correct (Chen et al. 2021, "Evaluating
 * Large Language Models Trained on Code", eq. 1): 1 − C(n−c, k) / C(n, k).
 */
export function passAtK(n: number, c: number, k: number): number {
  if (n - c < k) return 1;
  let prod = 1;
  for (let i = n - c + 1; i <= n; i++) prod *= 1 - k / i;
  return 1 - prod;
}

export async function evaluate(
  tasks: Task[],
  source: string,
  runner: RolloutRunner,
  launcher: AgentLauncher,
  opts: { k?: number; log?: (line: string) => void; onRow?: (row: EvalRow) => void } = {},
): Promise<EvalReport> {
  const k = opts.k ?? 1;
  const log = opts.log ?? (() => {});
  const t0 = performance.now();
  const base = await ensureBaseImage(undefined, log);
  const rows: EvalRow[] = [];
  const images = new Map<string, Promise<string>>();
  const image = (t: Task, def: Awaited<ReturnType<Task["definition"]>>) => {
    const key = `${def.environment.image ?? def.name}\0${def.environment.dir}`;
    if (!images.has(key)) images.set(key, ensureTaskImage(def, base.tag, { log }).then((i) => i.tag));
    return images.get(key)!;
  };
  await Promise.all(
    tasks.flatMap((t) =>
      Array.from({ length: k }, async (_, s) => {
        const def = await t.definition();
        let row: EvalRow;
        try {
          row = { task: t.id, sample: s + 1, ...(await runRollout(runner, launcher, t, def, await image(t, def), `eval-${launcher.name}-${safeName(t.id)}-${s + 1}`)) };
        } catch (e) {
          // A quarantined or unbuildable image is the environment's failure, not the agent's.
          if (!isSandboxEnvError(e)) throw e;
          row = { task: t.id, sample: s + 1, status: "env_error", reward: null, flags: [], ms: 0, envError: e.message };
        }
        rows.push(row);
        opts.onRow?.(row);
      }),
    ),
  );
  const order = new Map(tasks.map((t, i) => [t.id, i]));
  rows.sort((a, b) => order.get(a.task)! - order.get(b.task)! || a.sample - b.sample);
  const scores: TaskScore[] = tasks.map((t) => {
    const graded = rows.filter((r) => r.task === t.id && r.status !== "env_error");
    const c = graded.filter((r) => r.reward === 1).length;
    const n = graded.length;
    return { task: t.id, n, c, pass1: n ? c / n : 0, passK: n ? passAtK(n, c, Math.min(k, n)) : 0 };
  });
  const scored = scores.filter((s) => s.n > 0);
  const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
  const statuses: Record<string, number> = {};
  for (const r of rows) statuses[r.status] = (statuses[r.status] ?? 0) + 1;
  return {
    source,
    agent: launcher.name,
    k,
    tasks: tasks.length,
    rows,
    scores,
    pass1: mean(scored.map((s) => s.pass1)),
    passK: mean(scored.map((s) => s.passK)),
    statuses,
    mixed: scores.filter((s) => s.c > 0 && s.c < s.n).map((s) => s.task),
    wallMs: Math.round(performance.now() - t0),
  };
}

/** The mixed tasks as a task list (`lego eval --tasks LIST.json` and the rollout worker read it). */
export function mixedTaskList(report: EvalReport): TaskList {
  return { source: report.source, tasks: report.mixed };
}

/** The results table: one line per rollout, then the totals. */
export function formatTable(report: EvalReport): string {
  const head = ["task", "sample", "status", "reward", "flags", "time_s"];
  const body = report.rows.map((r) => [r.task, String(r.sample), r.status, r.reward === null ? "-" : String(r.reward), r.flags.join(",") || "-", (r.ms / 1000).toFixed(1)]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  const totals = `${report.tasks} tasks × k=${report.k} with ${report.agent}: pass@1 ${report.pass1.toFixed(3)}, pass@${report.k} ${report.passK.toFixed(3)}; ` +
    `${Object.entries(report.statuses).map(([s, n]) => `${s} ${n}`).join(", ")}; ${report.mixed.length} mixed; ${(report.wallMs / 1000).toFixed(1)} s`;
  return [line(head), ...body.map(line), totals].join("\n");
}
