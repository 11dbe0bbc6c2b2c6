/**
 * SWE-bench-style task records, one JSON object per line:
 *   instance_id, repo, base_commit, problem_statement, patch, test_patch,
 *   FAIL_TO_PASS, PASS_TO_PASS, version, environment_setup_commit
 * The two test lists may be JSON arrays or, as in the SWE-bench dataset,
 * JSON-encoded strings of arrays; both read the same. Other fields
 * (created_at, hints_text, our `lego` extras) are kept verbatim.
 * `parseSweBenchJsonl` and `formatSweBenchJsonl` are each other's opposite.
 */
import { TaskSourceError } from "./errors.ts";

export interface SweBenchRecord {
  instance_id: string;
  /** `owner/name`; found in TasksConfig.repoRoots as a git repository or an archive. */
  repo: string;
  /** The commit the agent starts from (the bug is present). */
  base_commit: string;
  problem_statement: string;
  /** The gold fix, a unified diff against base_commit. */
  patch: string;
  /** Tests added or changed by the fix, applied only at grading. */
  test_patch: string;
  FAIL_TO_PASS: string[];
  PASS_TO_PASS: string[];
  version: string;
  /** The commit the task image is built from; tasks sharing it share an image. */
  environment_setup_commit: string;
  /** Our extras (split, suite, verifier settings); absent in plain SWE-bench records. */
  lego?: LegoExtras;
  [field: string]: unknown;
}

/** What lego-rl adds to a record. Every field is optional; readers of plain SWE-bench ignore the key. */
export interface LegoExtras {
  /** `train` or `test`: held-out tasks are never trained on. */
  split?: "train" | "test";
  /** The suite or family the task belongs to (`builtin`, `easy`). */
  suite?: string;
  /** Directories (relative to the repository root) on the verifier's sys.path; default ["."]. */
  pythonpath?: string[];
  agent_timeout_sec?: number;
  verifier_timeout_sec?: number;
  /** A Harbor directory carried whole (a Harbor task exported to this format), see harbor.ts. */
  harbor?: Array<{ path: string; executable: boolean; base64: string }>;
  [field: string]: unknown;
}

const STRING_FIELDS = [
  "instance_id",
  "repo",
  "base_commit",
  "problem_statement",
  "patch",
  "test_patch",
  "version",
  "environment_setup_commit",
] as const;
const LIST_FIELDS = ["FAIL_TO_PASS", "PASS_TO_PASS"] as const;

function testList(value: unknown, where: string, field: string): string[] {
  let v = value;
  if (typeof v === "string") {
    try {
      v = JSON.parse(v);
    } catch {
      throw new TaskSourceError(where, field, "expected a JSON array of test ids (or a string holding one)");
    }
  }
  if (!Array.isArray(v) || v.some((s) => typeof s !== "string")) {
    throw new TaskSourceError(where, field, `expected an array of test ids, got ${JSON.stringify(value).slice(0, 80)}`);
  }
  return v as string[];
}

/** Checks one parsed object and normalises its test lists to arrays. `where` names file and line. */
export function toSweBenchRecord(obj: unknown, where: string): SweBenchRecord {
  if (typeof obj !== "object" || obj === null || Array.isArray(obj)) throw new TaskSourceError(where, "record", "expected a JSON object");
  const o = obj as Record<string, unknown>;
  for (const f of STRING_FIELDS) {
    // SWE-bench leaves version/environment_setup_commit/test_patch empty in some derived sets; missing is not allowed.
    if (typeof o[f] !== "string") throw new TaskSourceError(where, f, o[f] === undefined ? "missing" : "expected a string");
  }
  if (!o.instance_id) throw new TaskSourceError(where, "instance_id", "must not be empty");
  const out: Record<string, unknown> = { ...o };
  for (const f of LIST_FIELDS) out[f] = testList(o[f] ?? [], where, f);
  if (o.lego !== undefined && (typeof o.lego !== "object" || o.lego === null || Array.isArray(o.lego))) {
    throw new TaskSourceError(where, "lego", "expected an object");
  }
  return out as SweBenchRecord;
}

/** Reads JSONL text; blank lines are skipped, anything else malformed names its line. */
export function parseSweBenchJsonl(text: string, file: string): SweBenchRecord[] {
  const out: SweBenchRecord[] = [];
  const seen = new Map<string, number>();
  text.split("\n").forEach((line, i) => {
    if (!line.trim()) return;
    const where = `${file}:${i + 1}`;
    let obj: unknown;
    try {
      obj = JSON.parse(line);
    } catch (e) {
      throw new TaskSourceError(where, "line", `not JSON (${(e as Error).message})`);
    }
    const rec = toSweBenchRecord(obj, where);
    const prev = seen.get(rec.instance_id);
    if (prev !== undefined) throw new TaskSourceError(where, "instance_id", `${rec.instance_id} repeats line ${prev}`);
    seen.set(rec.instance_id, i + 1);
    out.push(rec);
  });
  return out;
}

/**
 * One line per record, the SWE-bench fields first in their documented order,
 * then the others in the order they came. `encodeLists` writes the test lists
 * as JSON-encoded strings, as the SWE-bench dataset does.
 */
export function formatSweBenchJsonl(records: SweBenchRecord[], opts: { encodeLists?: boolean } = {}): string {
  return records
    .map((r) => {
      const ordered: Record<string, unknown> = {};
      for (const f of ["instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch"]) ordered[f] = r[f];
      for (const f of LIST_FIELDS) ordered[f] = opts.encodeLists ? JSON.stringify(r[f]) : r[f];
      ordered.version = r.version;
      ordered.environment_setup_commit = r.environment_setup_commit;
      for (const [k, v] of Object.entries(r)) if (!(k in ordered)) ordered[k] = v;
      return `${JSON.stringify(ordered)}\n`;
    })
    .join("");
}
