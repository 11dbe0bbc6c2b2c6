/**
 * Suites named by a word instead of a path:
 *   easy[:seed=N,count=M,template=T+U,module=NAME]  generated on first use from the seed (easy.ts), cached;
 *   builtin                mined from real projects by `lego tasks mine` (mine.ts), cached.
 * Either takes `split=train|test` too: only that side of the suite's split (sources.ts).
 * Each lives in the cache as tasks.jsonl + repos/, the same layout `lego tasks export` writes.
 */
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { TasksConfig } from "./config.ts";
import { TaskSourceError } from "./errors.ts";
import { DEFAULT_EASY, EASY_NAMES, EASY_REPO, EASY_TEMPLATES, easyFamily, type EasyConfig } from "./easy.ts";
import { writeRepo } from "./git.ts";
import { writeOnce } from "./materialize.ts";
import { formatSweBenchJsonl } from "./swebench.ts";

export const SUITES = ["builtin", "easy"] as const;
export type SuiteName = (typeof SUITES)[number];

/** Bump when the easy family's templates change: a new folder is generated. */
const EASY_RECIPE = "v2"; // v2: six more training names, six phrasings of the instruction (easy.ts)

export function parseSuiteSpec(spec: string): { name: SuiteName; options: Record<string, string> } | undefined {
  const m = /^(builtin|easy)(?::(.*))?$/.exec(spec);
  if (!m) return undefined;
  const options: Record<string, string> = {};
  for (const kv of (m[2] ?? "").split(",").filter(Boolean)) {
    const [k, v] = kv.split("=", 2);
    if (!k || v === undefined) throw new TaskSourceError(spec, "suite options", `expected key=value, got '${kv}'`);
    options[k] = v;
  }
  return { name: m[1] as SuiteName, options };
}

export const repoDirName = (repo: string) => repo.replace("/", "__");

function easyConfig(options: Record<string, string>, spec: string): EasyConfig {
  const cfg: EasyConfig = { ...DEFAULT_EASY };
  for (const [k, v] of Object.entries(options)) {
    if (k === "template") {
      const names = v.split("+");
      const unknown = names.filter((n) => !(EASY_TEMPLATES as readonly string[]).includes(n));
      if (unknown.length) throw new TaskSourceError(spec, k, `unknown template(s) ${unknown.join(", ")} (known: ${EASY_TEMPLATES.join(", ")}; join several with +)`);
      cfg.templates = [...new Set(names)].sort();
      continue;
    }
    if (k === "module") {
      if (!(EASY_NAMES.modules as readonly string[]).includes(v)) throw new TaskSourceError(spec, k, `unknown module ${v} (known: ${EASY_NAMES.modules.join(", ")})`);
      cfg.module = v;
      continue;
    }
    if (k !== "seed" && k !== "count") throw new TaskSourceError(spec, k, "unknown easy option (seed, count, template, module, split)");
    const n = Number(v);
    if (!Number.isInteger(n) || n < (k === "count" ? 1 : 0)) throw new TaskSourceError(spec, k, `expected a ${k === "count" ? "positive" : "non-negative"} integer, got '${v}'`);
    cfg[k as "seed" | "count"] = n;
  }
  return cfg;
}

/** The easy suite's tasks.jsonl, generated into the cache if it is not there yet. */
export async function easySuite(cfg: TasksConfig, options: Record<string, string> = {}): Promise<string> {
  const easy = easyConfig(options, `easy:${Object.entries(options).map(([k, v]) => `${k}=${v}`).join(",")}`);
  const only = (easy.templates ? `-${easy.templates.join("+")}` : "") + (easy.module ? `-m${easy.module}` : "");
  const dir = join(cfg.cacheDir, "suites", `easy-${EASY_RECIPE}-s${easy.seed}-n${easy.count}${only}`);
  writeOnce(dir, (tmp) => {
    const family = easyFamily(easy);
    const ids = writeRepo(join(tmp, "repos", repoDirName(EASY_REPO)), family.commits);
    writeFileSync(join(tmp, "tasks.jsonl"), formatSweBenchJsonl(family.records(ids)));
  });
  return join(dir, "tasks.jsonl");
}

/** Where `lego tasks mine` writes the builtin suite. */
export function builtinSuiteDir(cfg: TasksConfig): string {
  return join(cfg.cacheDir, "suites", "builtin");
}

export function builtinSuite(cfg: TasksConfig): string {
  const file = join(builtinSuiteDir(cfg), "tasks.jsonl");
  if (!existsSync(file)) {
    throw new TaskSourceError("builtin", "suite", `not generated yet (${file} is missing): run \`lego tasks mine\` (needs the sdists scripts/setup fetches)`);
  }
  return file;
}
