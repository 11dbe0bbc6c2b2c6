/**
 * A task as the task sources hand it out: where it came from, its split and
 * named tests, its SWE-bench form when it is a repository + patch, and a
 * lazily built sandbox definition (materialised once, then cached).
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { hashTree, taskImageTag, type TaskDefinition } from "../sandbox/index.ts";
import type { RepoRef } from "./materialize.ts";
import type { SweBenchRecord } from "./swebench.ts";

export type Split = "train" | "test";

export interface Task {
  /** Unique within its source (SWE-bench instance_id, or the Harbor task's name). */
  id: string;
  /** The source it was read from: a suite name, a JSONL file, a directory. */
  source: string;
  split: Split | undefined;
  /** Named tests (pytest node ids) that fail before the fix and must pass after. */
  failToPass: string[];
  /** Named tests that pass before and must still pass after. */
  passToPass: string[];
  /** The SWE-bench form; absent for a task read from a Harbor directory. */
  record?: SweBenchRecord;
  /** Where the record's repository is; present with `record`. */
  repo?: RepoRef;
  /** The Harbor directory it was read from; present without `record`. */
  harborDir?: string;
  /** Builds (once) what the sandbox runs. */
  definition(): Promise<TaskDefinition>;
}

/** Memoises an async builder, so a task is materialised once however often it is asked for. */
export function once<T>(build: () => Promise<T>): () => Promise<T> {
  let p: Promise<T> | undefined;
  return () => (p ??= build());
}

/**
 * Content hash of everything that decides a health check's result: the image
 * (its tag hashes the environment), the overlay, the verifier's files, the
 * solution's files and the limits. Health results are cached under it.
 */
export function taskHash(def: TaskDefinition, baseTag: string): string {
  const h = createHash("sha256");
  h.update(`image ${taskImageTag(def, baseTag)}\0`);
  h.update(`config ${JSON.stringify(def.config)}\0`);
  for (const [kind, files] of [["overlay", def.overlay?.files ?? []], ["grading", def.overlay?.gradingFiles ?? []]] as const) {
    for (const f of [...files].sort((a, b) => (a.path < b.path ? -1 : 1))) {
      h.update(`${kind} ${f.path} ${f.mode & 0o111 ? "x" : "-"} ${f.content.length}\0`);
      h.update(f.content);
    }
  }
  h.update("tests\0");
  hashTree(def.testsDir, h);
  if (def.solveScript) {
    h.update("solution\0");
    h.update(readFileSync(def.solveScript));
    hashTree(def.solveScript.replace(/\/solve\.sh$/, ""), h);
  }
  return h.digest("hex").slice(0, 24);
}
