/**
 * Shared by the sandbox test files (no vitest globalSetup): builds the base
 * image once per machine if it is missing (a few minutes on a fresh machine,
 * under a host lock so parallel test files wait for one build) and the
 * fixture task images on top of it.
 */
import { fileURLToPath } from "node:url";
import { ensureBaseImage } from "./base-image.ts";
import { loadTask, type TaskDefinition } from "./task.ts";
import { ensureTaskImage, type TaskImage } from "./task-image.ts";
import { currentRun } from "./run-identity.ts";
import { containersOfRun } from "./reaper.ts";
import { RolloutRunner, type RolloutRunnerConfig } from "../rollout/index.ts";

export const FIXTURES = fileURLToPath(new URL("./fixtures/tasks/", import.meta.url));

/** The built-in fixture tasks: fix-add (setup script, keeps history), greet (Dockerfile), slugify (names its tests). */
export type FixtureName = "fix-add" | "greet" | "slugify";
export const FIXTURE_NAMES: readonly FixtureName[] = ["fix-add", "greet", "slugify"];

export function fixtureTask(name: FixtureName): TaskDefinition {
  return loadTask(`${FIXTURES}${name}`);
}

export async function fixtureImage(name: FixtureName): Promise<{ task: TaskDefinition; image: TaskImage }> {
  const base = await ensureBaseImage();
  const task = fixtureTask(name);
  return { task, image: await ensureTaskImage(task, base.tag) };
}

/**
 * Hook timeout for a file's image preparation: on a fresh machine the first
 * file builds the base image (~45 s alone, longer with two workers busy) while
 * the others wait on the host lock.
 */
export const IMAGE_BUILD_TIMEOUT_MS = 600_000;

/** Base image and every fixture task image, built if missing. */
export async function fixtureImages(): Promise<void> {
  for (const name of FIXTURE_NAMES) await fixtureImage(name);
}

/** Containers this test process still owns (tests assert it is empty after cleanup). */
export function leftoverContainers(): Promise<string[]> {
  return containersOfRun(currentRun().runId);
}

/** A fixture task ready to roll out: its definition and its image tag. */
export interface FixtureTask {
  task: TaskDefinition;
  image: string;
}

/** A fixture task's definition and image tag, built if missing. */
export async function fixtureRollout(name: FixtureName): Promise<FixtureTask> {
  const { task, image } = await fixtureImage(name);
  return { task, image: image.tag };
}

/** A rollout runner (2 at a time, no env_error retries) and the fixture tasks, as stage and attack tests use them. */
export async function openFixtureRollouts(
  config: Partial<RolloutRunnerConfig> = {},
): Promise<{ runner: RolloutRunner; fixAdd: FixtureTask; greet: FixtureTask; slugify: FixtureTask }> {
  const runner = await RolloutRunner.create({ concurrency: 2, maxAttempts: 1, ...config });
  return { runner, fixAdd: await fixtureRollout("fix-add"), greet: await fixtureRollout("greet"), slugify: await fixtureRollout("slugify") };
}
