/**
 * Image health check: a task's image is fit for training only if its gold
 * solution scores 1 and doing nothing scores 0, both through the real stages.
 * A failing image is quarantined with the reason; rollouts then refuse it
 * (ensureTaskImage) until a later check passes.
 */
import { dirname } from "node:path";
import { ensureBaseImage } from "./base-image.ts";
import { quarantine, release } from "./image-state.ts";
import type { RolloutRunner } from "../rollout/index.ts";
import { loadTask } from "./task.ts";
import { ensureTaskImage } from "./task-image.ts";
import { filesOfDir } from "./tar.ts";
import type { AgentProgram } from "./stages.ts";
import type { TaskDefinition } from "./task.ts";
import type { RolloutOutcome } from "./types.ts";

export interface TaskCheck {
  task: string;
  image: string;
  healthy: boolean;
  /** Why the image was quarantined (absent when healthy). */
  reason?: string;
  gold?: RolloutOutcome;
  empty?: RolloutOutcome;
}

function describe(o: RolloutOutcome): string {
  return o.status === "env_error" ? `env_error (${o.envError?.kind}: ${o.envError?.message})` : `${o.status}, reward ${o.reward}`;
}

/**
 * The gold solution as an agent program, as Harbor's oracle runs it: the
 * task's solution/ folder copied to /solution, then `bash /solution/solve.sh`
 * from /workspace. Undefined for a task without a solve.sh.
 */
export function oracleProgram(task: TaskDefinition): AgentProgram | undefined {
  if (!task.solveScript) return undefined;
  return { script: "bash /solution/solve.sh", files: filesOfDir(dirname(task.solveScript), "solution") };
}

export async function checkTask(taskDir: string, runner: RolloutRunner): Promise<TaskCheck> {
  const task = loadTask(taskDir);
  const base = await ensureBaseImage();
  const image = await ensureTaskImage(task, base.tag, { allowQuarantined: true });
  const fail = (reason: string, extra: Partial<TaskCheck> = {}): TaskCheck => {
    quarantine(image.tag, { reason, at: new Date().toISOString(), task: task.name });
    return { task: task.name, image: image.tag, healthy: false, reason, ...extra };
  };
  if (!task.solveScript) return fail("task has no solution/solve.sh to check against");
  const [gold, empty] = await Promise.all([
    runner.run({ task, image: image.tag, rolloutId: `check-gold-${task.name}`, agent: oracleProgram(task)! }),
    runner.run({ task, image: image.tag, rolloutId: `check-empty-${task.name}`, agent: { script: "true" } }),
  ]);
  const problems: string[] = [];
  if (gold.status !== "ok" || gold.reward !== 1) problems.push(`gold solution must score 1, got ${describe(gold)}`);
  if (empty.status !== "ok" || empty.reward !== 0) problems.push(`empty patch must score 0, got ${describe(empty)}`);
  if (problems.length) return fail(problems.join("; "), { gold, empty });
  release(image.tag);
  return { task: task.name, image: image.tag, healthy: true, gold, empty };
}
