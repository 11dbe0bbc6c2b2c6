/**
 * Harbor task directories as tasks, and a Harbor directory carried whole
 * inside a SWE-bench-style record (`lego.harbor`), so that any task can be
 * exported to JSONL and read back unchanged. A Harbor task's environment can
 * be any Dockerfile: there is no repository and patch to write, so its files
 * travel as they are.
 */
import { createHash } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { filesOfDir, loadTask } from "../sandbox/index.ts";
import type { TasksConfig } from "./config.ts";
import { TaskSourceError } from "./errors.ts";
import { safeName, writeOnce } from "./materialize.ts";
import type { SweBenchRecord } from "./swebench.ts";
import { once, type Task } from "./task.ts";

/** One file of an embedded Harbor directory. */
export interface EmbeddedFile {
  path: string;
  executable: boolean;
  base64: string;
}

export function harborTask(dir: string, source: string, id?: string): Task {
  const def = loadTask(dir);
  const split = def.metadata.split;
  return {
    id: id ?? def.name,
    source,
    split: split === "train" || split === "test" ? split : undefined,
    failToPass: [],
    passToPass: [],
    harborDir: def.dir,
    definition: once(async () => (id ? { ...def, name: id } : def)),
  };
}

/** The record that carries a Harbor directory (every file, exec bits kept). */
export function harborRecord(task: Task, instruction: string, schemaVersion: string): SweBenchRecord {
  if (!task.harborDir) throw new TaskSourceError(task.source, task.id, "not a Harbor directory task");
  const files: EmbeddedFile[] = filesOfDir(task.harborDir, "").map((f) => ({
    path: f.path,
    executable: (f.mode & 0o111) !== 0,
    base64: f.content.toString("base64"),
  }));
  return {
    instance_id: task.id,
    repo: `harbor/${safeName(task.id)}`,
    base_commit: "",
    problem_statement: instruction,
    patch: "",
    test_patch: "",
    FAIL_TO_PASS: task.failToPass,
    PASS_TO_PASS: task.passToPass,
    version: schemaVersion,
    environment_setup_commit: "",
    lego: { ...(task.split ? { split: task.split } : {}), harbor: files },
  };
}

/** Writes an embedded Harbor directory into the cache (once per content) and reads it as a task. */
export function harborFromRecord(record: SweBenchRecord, source: string, cfg: TasksConfig): Task {
  const files = record.lego?.harbor as EmbeddedFile[] | undefined;
  if (!Array.isArray(files) || files.some((f) => typeof f?.path !== "string" || typeof f.base64 !== "string" || f.path.split("/").includes(".."))) {
    throw new TaskSourceError(`${source}: ${record.instance_id}`, "lego.harbor", "expected [{path, executable, base64}] with relative paths");
  }
  const h = createHash("sha256").update(JSON.stringify(files)).digest("hex").slice(0, 12);
  const dir = writeOnce(join(cfg.cacheDir, "harbor", `${safeName(record.instance_id)}-${h}`), (tmp) => {
    for (const f of files) {
      mkdirSync(dirname(join(tmp, f.path)), { recursive: true });
      writeFileSync(join(tmp, f.path), Buffer.from(f.base64, "base64"), { mode: f.executable ? 0o755 : 0o644 });
    }
  });
  return harborTask(dir, source, record.instance_id);
}
