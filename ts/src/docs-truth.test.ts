/**
 * Docs that cannot drift (issue 21): README.md and docs/*.md may only name
 * repository paths that exist and `lego` flags that the named subcommand's
 * --help lists. Paths are checked when a code span or link names one under a
 * top-level folder of the repository (`ts/src/proxy/`, `docs/sandbox.md`) or,
 * relative to ts/ or python-bridge/, under `src/` or `lego_rl/`; names with
 * placeholders (`<id>`, `*`, `$VAR`) are patterns, not paths, and are skipped;
 * so are ```tree blocks, which draw a layout relative to what they describe
 * (a task directory), not the repository, and paths git ignores (`var/`,
 * `ts/build/`): outputs of a run, present on one machine and not in a clone.
 */
import { execFile, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const repoRoot = resolve(import.meta.dirname, "../..");
const LEGO = join(repoRoot, "ts/bin/lego");
const docs = ["README.md", ...readdirSync(join(repoRoot, "docs")).filter((n) => n.endsWith(".md")).map((n) => `docs/${n}`)];
const topLevel = new Set(readdirSync(repoRoot).filter((n) => !n.startsWith(".") && n !== "node_modules"));

/** The paths among `paths` that git ignores (run outputs, not repository content). */
function ignored(paths: string[]): Set<string> {
  if (paths.length === 0) return new Set();
  const r = spawnSync("git", ["check-ignore", "--no-index", "--stdin"], { cwd: repoRoot, input: paths.join("\n"), encoding: "utf8" });
  if (r.status !== 0 && r.status !== 1) throw new Error(`git check-ignore failed: ${r.stderr}`);
  return new Set(r.stdout.split("\n").filter(Boolean));
}
const nestedRoots: Record<string, string[]> = { src: ["ts"], lego_rl: ["python-bridge"], bin: ["ts"], native: ["ts"] };

/** Code spans and fenced code lines of a Markdown text. */
function codeOf(text: string): string[] {
  const out: string[] = [];
  for (const block of text.matchAll(/^```([^\n]*)\n([\s\S]*?)^```/gm)) if (block[1] !== "tree") out.push(...block[2]!.split("\n"));
  const prose = text.replace(/^```[^\n]*\n[\s\S]*?^```/gm, "");
  for (const span of prose.matchAll(/`([^`\n]+)`/g)) out.push(span[1]!);
  return out;
}

function pathProblems(doc: string, text: string): string[] {
  const problems: string[] = [];
  const candidates = new Set<string>();
  for (const code of codeOf(text)) for (const token of code.split(/[\s,;()'"=]+/)) candidates.add(token);
  const links = [...text.matchAll(/\]\(([^)\s#]+)(?:#[^)]*)?\)/g)].map((m) => m[1]!).filter((l) => !/^[a-z]+:/.test(l));
  const checked: Array<[string, string, string[]]> = [];
  for (const raw of candidates) {
    const path = raw.replace(/[.:]+$/, "").replace(/^\.\//, "");
    if (!/^[\w.@-]+\/[\w.@/+-]*$/.test(path) || /[<>*${}]|\.\.\./.test(path)) continue;
    const first = path.split("/")[0]!;
    const roots = topLevel.has(first) ? [""] : nestedRoots[first];
    if (roots) checked.push([raw, path, roots]);
  }
  const outputs = ignored(checked.flatMap(([, path, roots]) => roots.map((root) => join(root, path))));
  for (const [raw, path, roots] of checked) {
    if (roots.some((root) => outputs.has(join(root, path)))) continue;
    if (!roots.some((root) => existsSync(join(repoRoot, root, path)))) problems.push(`${doc}: \`${raw}\` does not exist`);
  }
  for (const link of links) {
    if (/[<>*${}]/.test(link)) continue;
    if (!existsSync(resolve(repoRoot, dirname(doc), link))) problems.push(`${doc}: link ${link} does not exist`);
  }
  return problems;
}

const run = promisify(execFile);
const helpCache = new Map<string, Promise<string | null>>();
/** `lego WORDS --help`, or null when WORDS is not a subcommand. */
function help(words: string[]): Promise<string | null> {
  const key = words.join(" ");
  let text = helpCache.get(key);
  if (!text) {
    text = run(LEGO, [...words, "--help"], { timeout: 60_000 }).then((r) => r.stdout, () => null);
    helpCache.set(key, text);
  }
  return text;
}

interface FlagUse { doc: string; words: string[]; flags: string[]; code: string }

/** Every `lego SUB [SUB2] ... --flag` in the docs' code, cut at pipes and command separators. */
function flagUses(doc: string, text: string): FlagUse[] {
  const uses: FlagUse[] = [];
  for (const code of codeOf(text)) {
    for (const command of code.split(/\||;|&&/)) {
      const at = command.search(/(?:^|[\s/])lego\s+[a-z]/);
      if (at < 0) continue;
      const tokens = command.slice(at).trim().split(/\s+/).slice(1);
      const words: string[] = [];
      for (const t of tokens) if (/^[a-z][\w-]*$/.test(t) && words.length < 2 && !tokens.slice(0, tokens.indexOf(t)).some((p) => p.startsWith("-"))) words.push(t); else break;
      const flags = tokens.filter((t) => /^--[a-z][\w-]*/.test(t)).map((t) => t.split("=")[0]!);
      if (words.length > 0) uses.push({ doc, words, flags, code: command.trim() });
    }
  }
  return uses;
}

describe("README.md and docs/*.md", () => {
  it("name only repository paths that exist", () => {
    const problems = docs.flatMap((doc) => pathProblems(doc, readFileSync(join(repoRoot, doc), "utf8")));
    expect(problems).toEqual([]);
  });

  it("name only lego subcommands and flags that --help lists", { timeout: 240_000 }, async () => {
    const uses = docs.flatMap((doc) => flagUses(doc, readFileSync(join(repoRoot, doc), "utf8")));
    expect(uses.length).toBeGreaterThan(5); // the extractor finds the docs' commands at all
    const top = await help([]);
    expect(top).toContain("lego sandbox");
    const problems: string[] = [];
    for (const use of uses) {
      const [first, second] = use.words;
      if (!top!.includes(`lego ${first}`)) {
        problems.push(`${use.doc}: \`${use.code}\`: no subcommand lego ${first}`);
        continue;
      }
      const firstHelp = await help([first!]);
      const words = second && firstHelp?.includes(`lego ${first} ${second}`) ? [first!, second] : [first!];
      const text = (await help(words)) ?? "";
      for (const flag of use.flags) {
        const plain = flag.replace(/^--no-/, "--");
        if (!new RegExp(`(^|[\\s,])(${flag}|${plain})(?![\\w-])`, "m").test(text)) {
          problems.push(`${use.doc}: \`${use.code}\`: lego ${words.join(" ")} --help lists no ${flag}`);
        }
      }
    }
    expect(problems).toEqual([]);
  });
});
