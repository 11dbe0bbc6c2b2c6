/**
 * Shared by the red-team files: fixture tasks, a rollout runner that would
 * retry an env_error (so `attempts: 1` proves no attack became one), and the
 * checks every file ends with (no container, no loop device of ours left).
 *
 * Every attack runs on fix-add (graded on exit status plus pytest's report)
 * and slugify (graded on named tests); each scripted agent would score 1 or
 * escape without its defense.
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { promisify } from "node:util";
import { expect } from "vitest";
import { QUOTA_FILE_PREFIX } from "../../ts/src/sandbox/disk-quota.ts";
import { RolloutRunner, type RolloutRunnerConfig } from "../../ts/src/rollout/index.ts";
import type { DefenseFlag, RolloutOutcome } from "../../ts/src/sandbox/index.ts";
import { currentRun } from "../../ts/src/sandbox/run-identity.ts";
import { fixtureRollout, leftoverContainers, type FixtureTask } from "../../ts/src/sandbox/test-support.ts";

export { IMAGE_BUILD_TIMEOUT_MS, fixtureImages } from "../../ts/src/sandbox/test-support.ts";
export type { FixtureTask };

/** The two tasks every attack runs on: one graded without named tests, one with. */
export const ATTACKED = ["fix-add", "slugify"] as const;
export type AttackedTask = (typeof ATTACKED)[number];

/** The module file of each attacked task that its tests import (the code under test). */
export const CODE_UNDER_TEST: Record<AttackedTask, string> = { "fix-add": "calc.py", slugify: "textkit/slug.py" };

export interface RedTeam {
  runner: RolloutRunner;
  tasks: Record<AttackedTask | "greet", FixtureTask>;
  /** One rollout of a scripted agent; `agentTimeoutSec` overrides the task's. */
  attack(task: AttackedTask | "greet", id: string, script: string, agentTimeoutSec?: number): Promise<RolloutOutcome>;
  /** Waits for this runner's removals; then checks nothing of this process is left (see closeAll for several). */
  close(): Promise<void>;
}

/** Closes every runner, then checks that this process left no container and no loop device. */
export async function closeAll(...teams: RedTeam[]): Promise<void> {
  await Promise.all(teams.map((t) => t.runner.close()));
  expect(await leftoverContainers()).toEqual([]);
  expect(await settledLoopDevices()).toEqual([]);
}

/**
 * This run's loop devices still attached once they have had `boundMs` to go: a quota's device is
 * released with its container's last mount, which can trail the container's removal by a moment
 * (seen in CI: two devices, their backing files already deleted, at the check). A leak stays past the bound.
 */
async function settledLoopDevices(boundMs = 10_000): Promise<string[]> {
  const until = Date.now() + boundMs;
  for (;;) {
    const left = await ownLoopDevices();
    if (left.length === 0 || Date.now() >= until) return left;
    await new Promise((r) => setTimeout(r, 250));
  }
}

export async function openRedTeam(config: Partial<RolloutRunnerConfig> = {}): Promise<RedTeam> {
  // maxAttempts 3: an attack that turned into an env_error would show up as a retry.
  const runner = await RolloutRunner.create({ concurrency: 2, maxAttempts: 3, ...config });
  const tasks = {
    "fix-add": await fixtureRollout("fix-add"),
    slugify: await fixtureRollout("slugify"),
    greet: await fixtureRollout("greet"),
  };
  const team: RedTeam = {
    runner,
    tasks,
    attack: (task, id, script, agentTimeoutSec) =>
      runner.run({ ...tasks[task], rolloutId: `${task}-${id}`, agent: { script }, ...(agentTimeoutSec ? { agentTimeoutSec } : {}) }),
    close: () => closeAll(team),
  };
  return team;
}

/** The attack was graded (or stopped) as the agent's outcome: reward 0, these flags, never an env_error or a retry. */
export function expectDefended(o: RolloutOutcome, status: RolloutOutcome["status"], flags: DefenseFlag[]): void {
  expect({ status: o.status, reward: o.reward, attempts: o.attempts, defenseFlags: o.defenseFlags }).toEqual({
    status, reward: 0, attempts: 1, defenseFlags: [...flags].sort(),
  });
}

/** Loop devices still backed by this process's quota files (each container's goes when it is removed). */
export async function ownLoopDevices(): Promise<string[]> {
  const { stdout } = await promisify(execFile)("losetup", ["--list", "--noheadings", "--output", "NAME,BACK-FILE"]);
  return stdout.split("\n").filter((l) => l.includes(`${QUOTA_FILE_PREFIX}${currentRun().runId}-`));
}

/** The task's gold solution as an agent script: attacks that add it would score 1 without their defense. */
export function gold(rt: RedTeam, task: AttackedTask | "greet"): string {
  return readFileSync(rt.tasks[task].task.solveScript!, "utf8");
}

/** A Python snippet appended to the code under test: it runs whenever the verifier imports that module. */
export function appendToCode(task: AttackedTask, python: string): string {
  return `cat >> ${CODE_UNDER_TEST[task]} <<'PY'\n\n${python}\nPY`;
}
