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
import { RolloutRunner } from "./rollout-runner.ts";

export const FIXTURES = fileURLToPath(new URL("./fixtures/tasks/", import.meta.url));

export function fixtureTask(name: "fix-add" | "greet"): TaskDefinition {
  return loadTask(`${FIXTURES}${name}`);
}

export async function fixtureImage(name: "fix-add" | "greet"): Promise<{ task: TaskDefinition; image: TaskImage }> {
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

/** Base image and both fixture task images, built if missing. */
export async function fixtureImages(): Promise<void> {
  await fixtureImage("fix-add");
  await fixtureImage("greet");
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

/** A rollout runner (2 at a time, no env_error retries) and both fixture tasks, as stage and attack tests use them. */
export async function openFixtureRollouts(): Promise<{ runner: RolloutRunner; fixAdd: FixtureTask; greet: FixtureTask }> {
  const runner = await RolloutRunner.create({ concurrency: 2, maxAttempts: 1 });
  const a = await fixtureImage("fix-add");
  const g = await fixtureImage("greet");
  return { runner, fixAdd: { task: a.task, image: a.image.tag }, greet: { task: g.task, image: g.image.tag } };
}
