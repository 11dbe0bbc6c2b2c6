/**
 * The `easy` family: tasks a tiny model can learn on CPU. Each is one short
 * Python module with one bug made from a template (a wrong constant, a wrong
 * operator, a missing return, an off-by-one comparison), a test file beside
 * it, and a one-line instruction naming the file, the call and the value it
 * should give, in one of six phrasings. A solving episode is read file, write file,
 * submit. Variants are drawn from a seed; held-out tasks (split `test`) use
 * function names no training task uses, so evaluation shows generalisation.
 *
 * The family is one repository (an environment commit, then one commit per
 * variant) and so one task image: a variant is only an overlay of two files.
 */
import { formatPatch, structuredPatch } from "diff";
import type { SweBenchRecord } from "./swebench.ts";
import type { CommitSpec, Tree } from "./git.ts";

export interface EasyConfig {
  seed: number;
  /** How many variants (train and test together). */
  count: number;
  /**
   * Only these templates (default: all). The demo uses `comparison` alone: its fix
   * (`x > limit` -> `x >= limit` in the file the instruction names) is determined by
   * the instruction, so a tiny model can learn it without reading the file.
   */
  templates?: readonly string[];
  /**
   * Only this module name (default: any of the family's). With `comparison` the fix is then
   * one fixed edit of one fixed file: the demo's task, a short action a tiny model can learn
   * on CPU in minutes (docs/demo.md says what that does and does not show).
   */
  module?: string;
}

export const DEFAULT_EASY: EasyConfig = { seed: 0, count: 2000 };

export const EASY_TEMPLATES = ["comparison", "constant", "missing_return", "operator"] as const;

export const EASY_REPO = "lego-rl/easy";

/** mulberry32 (Tommy Ettinger, public domain): a small seeded PRNG, identical on every platform. */
export class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.next() * xs.length)]!;
  }
}

// Names must be plain identifiers: not Python keywords (`raise` was one, and the gold patch
// could not fix a syntax error), not builtins, not the comparison template's `limit` parameter.
const TRAIN_NAMES = [
  "scale", "total", "bump", "shift", "grow", "boost", "offset", "adjust", "stretch", "hoist",
  "tally", "blend", "merge", "weigh", "price", "score", "count", "gauge", "rate", "measure",
  "cost", "cap", "clip", "push", "lift", "spread", "span", "fill", "pack", "stack",
  // As long as the longest held-out names (4 tokens in the instruction with Qwen3's tokenizer, `amplify`,
  // `magnify`): with every training name 2-3 tokens long, a held-out instruction was longer than any training
  // one, and a tiny model trained from scratch reads that as a new position (measured: the first token of the
  // reply went from `<tool_call>` at p 0.87 to p 0.10 at one token more, whatever the name). None shares a
  // token with a held-out name.
  "elevate", "replenish", "accrue", "saturate", "supersize", "reinforce",
] as const;
/** Held out: no training variant uses these names. */
const TEST_NAMES = ["widen", "deepen", "extend", "amplify", "inflate", "enlarge", "double_up", "magnify"] as const;
// None may shadow a standard-library module (`numbers` did: the test imported the stdlib one).
const MODULES = ["calc", "ops", "mathx", "numeric", "tools", "arith"] as const;
const HELPERS = ["identity", "same", "echo", "keep"] as const;

/** Every name a variant can use, for the test that checks none is a keyword or a builtin. */
export const EASY_NAMES = { functions: [...TRAIN_NAMES, ...TEST_NAMES], modules: MODULES, helpers: HELPERS } as const;

export class EasyConfigError extends Error {}

/** One variant before it becomes a record: the module with the bug, the fix, and the test. */
interface Variant {
  template: string;
  module: string;
  buggy: string;
  fixed: string;
  test: string;
  failing: string;
  passing: string;
  instruction: string;
}

/** A template's draw: the variant before its instruction is phrased, with the call and value the instruction names. */
type Drawn = Omit<Variant, "instruction"> & { call: string; expected: string };
type Template = (rng: Rng, fn: string, module: string, helper: string) => Drawn;

const helperSrc = (helper: string) => `\n\ndef ${helper}(x):\n    return x\n`;
const testFile = (module: string, fn: string, helper: string, call: string, expected: string) =>
  `from ${module} import ${fn}, ${helper}\n\n\ndef test_${fn}():\n    assert ${call} == ${expected}\n\n\ndef test_${helper}():\n    assert ${helper}(7) == 7\n`;
/**
 * Ways to say one instruction, of different lengths and orders. With one phrasing every prompt of a template
 * had the same length to within a token or two, and a tiny model trained from scratch learned the reply's
 * first token from its absolute position instead of from the prompt (measured: `<tool_call>` at p 0.95 at the
 * trained length, 0.09 one token later, whatever the name): a held-out task one token longer failed.
 */
const PHRASINGS: ReadonlyArray<(file: string, call: string, expected: string) => string> = [
  (f, c, e) => `In \`${f}\`, \`${c}\` should return \`${e}\`. Fix the bug.`,
  (f, c, e) => `Fix the bug in \`${f}\`: \`${c}\` should return \`${e}\`.`,
  (f, c, e) => `\`${c}\` in \`${f}\` should return \`${e}\`, but it does not. Fix the bug.`,
  (f, c, e) => `A test fails: in \`${f}\`, calling \`${c}\` should return \`${e}\`. Find the bug and fix it.`,
  (f, c, e) => `Please fix \`${f}\`. The call \`${c}\` is expected to return \`${e}\`.`,
  (f, c, e) => `Bug report: \`${c}\` from \`${f}\` should give \`${e}\`. Change the code so that it does.`,
];
const sentence = (module: string, call: string, expected: string, phrasing: number) => `${PHRASINGS[phrasing]!(`${module}.py`, call, expected)}\n`;

const TEMPLATES: Record<string, Template> = {
  constant(rng, fn, module, helper) {
    const k = rng.int(2, 9);
    const wrong = rng.pick([k - 1, k + 1]);
    const a = rng.int(2, 9);
    const body = (c: number) => `def ${fn}(n):\n    return n * ${c}${helperSrc(helper)}`;
    const call = `${fn}(${a})`;
    return variant("constant", module, body(wrong), body(k), fn, helper, call, String(a * k));
  },
  operator(rng, fn, module, helper) {
    const [good, bad] = rng.pick([["+", "-"], ["-", "+"], ["*", "+"]] as const);
    const a = rng.int(3, 9);
    const b = rng.int(3, 9);
    const value = good === "+" ? a + b : good === "-" ? a - b : a * b;
    const body = (op: string) => `def ${fn}(a, b):\n    return a ${op} b${helperSrc(helper)}`;
    return variant("operator", module, body(bad), body(good), fn, helper, `${fn}(${a}, ${b})`, String(value));
  },
  missing_return(rng, fn, module, helper) {
    const k = rng.int(2, 9);
    const a = rng.int(2, 9);
    const body = (ret: boolean) => `def ${fn}(x):\n    result = x + ${k}\n${ret ? "    return result\n" : ""}${helperSrc(helper)}`;
    return variant("missing_return", module, body(false), body(true), fn, helper, `${fn}(${a})`, String(a + k));
  },
  comparison(rng, fn, module, helper) {
    const a = rng.int(2, 9);
    const body = (op: string) => `def ${fn}(x, limit):\n    return x ${op} limit${helperSrc(helper)}`;
    return variant("comparison", module, body(">"), body(">="), fn, helper, `${fn}(${a}, ${a})`, "True");
  },
};

function variant(template: string, module: string, buggy: string, fixed: string, fn: string, helper: string, call: string, expected: string): Drawn {
  return {
    template,
    module,
    buggy,
    fixed,
    test: testFile(module, fn, helper, call, expected),
    failing: `test_${module}.py::test_${fn}`,
    passing: `test_${module}.py::test_${helper}`,
    call,
    expected,
  };
}

/** A git-style unified diff of one file (what `git diff` prints, so `git apply` takes it). */
export function fileDiff(path: string, before: string, after: string): string {
  const p = structuredPatch(`a/${path}`, `b/${path}`, before, after, undefined, undefined, { context: 3 });
  return formatPatch({ ...p, isGit: true } as Parameters<typeof formatPatch>[0]);
}

const ENV_FILES: Tree = new Map([["README.md", { content: Buffer.from("Small Python modules, one bug each.\n"), executable: false }]]);

/** The family's records and the repository commits they name (commit ids filled in by the caller's writeRepo). */
export function easyFamily(cfg: EasyConfig): { commits: CommitSpec[]; records: (commitIds: string[]) => SweBenchRecord[] } {
  const rng = new Rng(cfg.seed);
  const templates = cfg.templates ? [...new Set(cfg.templates)].sort() : Object.keys(TEMPLATES).sort();
  const unknown = templates.filter((t) => !(t in TEMPLATES));
  if (cfg.module !== undefined && !(MODULES as readonly string[]).includes(cfg.module))
    throw new EasyConfigError(`unknown easy module ${JSON.stringify(cfg.module)} (known: ${MODULES.join(", ")})`);
  if (unknown.length || !templates.length) throw new EasyConfigError(`unknown easy template(s) ${JSON.stringify(unknown)} (known: ${Object.keys(TEMPLATES).sort().join(", ")})`);
  const commits: CommitSpec[] = [{ branch: "env", message: "easy family: environment\n", files: ENV_FILES }];
  const made: Array<Variant & { id: string; split: "train" | "test" }> = [];
  // Its own stream: drawing phrasings from `rng` would change every later variant's split, names and values.
  const phrasings = new Rng(cfg.seed ^ 0x9e3779b9);
  for (let i = 0; i < cfg.count; i++) {
    const split = rng.next() < 0.2 ? "test" : "train";
    const fn = rng.pick(split === "test" ? TEST_NAMES : TRAIN_NAMES);
    const module = cfg.module ?? rng.pick(MODULES);
    const helper = rng.pick(HELPERS);
    const template = templates[i % templates.length]!;
    const { call, expected, ...drawn } = TEMPLATES[template]!(rng, fn, module, helper);
    const v: Variant = { ...drawn, instruction: sentence(module, call, expected, phrasings.int(0, PHRASINGS.length - 1)) };
    const id = `easy-s${cfg.seed}-${String(i).padStart(5, "0")}-${template}`;
    made.push({ ...v, id, split });
    commits.push({
      branch: `task/${id}`,
      message: `${id}\n`,
      parent: 0,
      files: new Map([
        [`${module}.py`, { content: Buffer.from(v.buggy), executable: false }],
        [`test_${module}.py`, { content: Buffer.from(v.test), executable: false }],
      ]),
    });
  }
  return {
    commits,
    records: (ids) =>
      made.map((v, i) => ({
        instance_id: v.id,
        repo: EASY_REPO,
        base_commit: ids[i + 1]!,
        problem_statement: v.instruction,
        patch: fileDiff(`${v.module}.py`, v.buggy, v.fixed),
        test_patch: "",
        FAIL_TO_PASS: [v.failing],
        PASS_TO_PASS: [v.passing],
        version: "1",
        environment_setup_commit: ids[0]!,
        lego: { suite: "easy", split: v.split, template: v.template, agent_timeout_sec: 120, verifier_timeout_sec: 60 },
      })),
  };
}
