/**
 * docs/guide.md's commands are exercised (issue 27), in the style of docs-truth.test.ts:
 * blocks marked ```sh test:run / ```python test:run are run for real, in order, from the
 * repository root (the cheap ones: --help, lego check, Harbor tasks listed and validated,
 * lego eval of one task with scripted-gold, a receiver's spool read as in Jupyter, a monitor
 * replay); in every other sh block each command starts with a program the repository has, and
 * the flags of each `lego …` and `python -m lego_rl…` command, continuation lines joined, are
 * ones that command's own --help lists (the CLI's flag definitions, yargs and argparse); after a
 * Ray entry point's `--`, the rollout fleet's arguments, the ones `lego rollout --help` lists.
 */
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const repoRoot = resolve(import.meta.dirname, "../..");
const guide = readFileSync(join(repoRoot, "docs/guide.md"), "utf8");
const PYTHON = join(repoRoot, ".venv/bin/python");
const LEGO = join(repoRoot, "ts/bin/lego");
const WORK = join(repoRoot, "var/guide");

interface Block { lang: string; run: boolean; body: string }

function blocks(text: string): Block[] {
  return [...text.matchAll(/^```(\w+)([^\n]*)\n([\s\S]*?)^```/gm)].map((m) => ({ lang: m[1]!, run: /\btest:run\b/.test(m[2]!), body: m[3]! }));
}

/** The commands of a shell block: continuation lines joined, comments and `&`/`wait` plumbing dropped. */
function commands(body: string): string[] {
  return body.replace(/\\\n\s*/g, " ").split("\n").map((l) => l.replace(/\s+#.*$/, "").replace(/\s*&$/, "").trim())
    .filter((l) => l && !l.startsWith("#") && l !== "wait");
}

const run = promisify(execFile);
const helpCache = new Map<string, Promise<string>>();
function help(program: string[], words: string[]): Promise<string> {
  const key = [...program, ...words].join(" ");
  let text = helpCache.get(key);
  if (!text) {
    const [command, ...args] = program;
    text = run(command!, [...args, ...words, "--help"], { cwd: repoRoot, timeout: 120_000 }).then((r) => r.stdout, (e: Error) => `FAILED: ${e.message}`);
    helpCache.set(key, text);
  }
  return text;
}

const lists = (text: string, flag: string) => new RegExp(`(^|[\\s,\\[])(${flag}|${flag.replace(/^--no-/, "--")})(?![\\w-])`, "m").test(text);
const flagsOf = (tokens: string[]) => tokens.filter((t) => /^--[a-z][\w-]*/.test(t)).map((t) => t.split("=")[0]!);

/** Runs one block in its own process group, killed whole when it overruns (a backgrounded receiver included). */
function runBlock(block: Block, timeoutMs: number): Promise<{ code: number | null; out: string }> {
  const [command, args] = block.lang === "python" ? [PYTHON, ["-c", block.body]] : ["bash", ["-euo", "pipefail", "-c", block.body]];
  return new Promise((done) => {
    const child = spawn(command, args, { cwd: repoRoot, detached: true, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => { out += `\n[killed after ${timeoutMs} ms]`; process.kill(-child.pid!, "SIGKILL"); }, timeoutMs);
    child.on("close", (code) => {
      clearTimeout(timer);
      try { process.kill(-child.pid!, "SIGKILL"); } catch { /* the group has already exited */ }
      done({ code, out });
    });
  });
}

/** What the output of a block running this command must show, beyond exit status 0. */
const EXPECTED: Array<[RegExp, RegExp]> = [
  [/lego --help/, /lego check +preflight/],
  [/lego check .*--config/, /^ok {3}memory: 30\.53B parameters/m],
  [/lego tasks validate/, /"healthy":true/],
  [/lego eval .*--harness claude-code --engine scripted-gold/, /pass@1 1\.000/],
  [/lego monitor replay/, /"kind":"lr_zero"/],
];

describe("docs/guide.md", () => {
  const all = blocks(guide);
  const runnable = all.filter((b) => b.run);

  beforeAll(() => { rmSync(WORK, { recursive: true, force: true }); mkdirSync(WORK, { recursive: true }); });
  afterAll(() => rmSync(WORK, { recursive: true, force: true }));

  it("marks the cheap commands of every section to run, and every block is sh, python or a tree", () => {
    expect(all.every((b) => ["sh", "python", "tree"].includes(b.lang))).toBe(true);
    const ran = runnable.flatMap((b) => (b.lang === "sh" ? commands(b.body) : []));
    for (const [pattern] of EXPECTED) expect(ran.some((c) => pattern.test(c)), String(pattern)).toBe(true);
    expect(runnable.some((b) => b.lang === "python" && b.body.includes("lego_rl.open_spool"))).toBe(true);
  });

  it("names only programs the repository has, with flags their --help lists", { timeout: 600_000 }, async () => {
    const problems: string[] = [];
    const shell = all.filter((b) => b.lang === "sh").flatMap((b) => commands(b.body));
    expect(shell.length).toBeGreaterThan(15);
    for (const command of shell) {
      for (const part of command.split(/\s*(?:\||;|&&|>)\s*/)) {
        const tokens = part.split(/\s+/);
        const program = tokens[0]!;
        if (["printf", "var/guide/rollout.jsonl", "var/guide/steps.jsonl"].includes(program)) continue;
        if (!existsSync(join(repoRoot, program))) {
          problems.push(`\`${command}\`: ${program} is not in the repository`);
          continue;
        }
        if (program === "ts/bin/lego") {
          const words: string[] = [];
          for (const t of tokens.slice(1)) if (/^[a-z][\w-]*$/.test(t) && words.length < 2) words.push(t); else break;
          const first = await help([LEGO], words.slice(0, 1));
          const used = words.length === 2 && first.includes(`lego ${words[0]} ${words[1]}`) ? words : words.slice(0, 1);
          const text = await help([LEGO], used);
          for (const flag of flagsOf(tokens)) if (!lists(text, flag)) problems.push(`\`${command}\`: lego ${used.join(" ")} --help lists no ${flag}`);
        } else if (program === ".venv/bin/python" && tokens[1] === "-m" && tokens[2]!.startsWith("lego_rl")) {
          const module = tokens[2]!;
          const sub = tokens[3] && /^[a-z]+$/.test(tokens[3]) ? [tokens[3]] : [];
          const text = await help([PYTHON, "-m", module], sub);
          if (text.startsWith("FAILED")) problems.push(`\`${command}\`: python -m ${module} ${sub.join(" ")} --help failed: ${text}`);
          // After `--` come the `lego rollout` arguments of the fleet the Ray entry points start (their --help says so).
          const dashes = tokens.indexOf("--");
          const own = dashes < 0 ? tokens : tokens.slice(0, dashes);
          for (const flag of flagsOf(own)) if (!lists(text, flag)) problems.push(`\`${command}\`: python -m ${module} --help lists no ${flag}`);
          if (dashes >= 0) {
            if (!text.includes("-- ROLLOUT-ARGS")) problems.push(`\`${command}\`: python -m ${module} --help takes nothing after --`);
            const rollout = await help([LEGO], ["rollout"]);
            for (const flag of flagsOf(tokens.slice(dashes + 1))) if (!lists(rollout, flag)) problems.push(`\`${command}\`: lego rollout --help lists no ${flag} (after --)`);
          }
        }
      }
    }
    expect(problems).toEqual([]);
  });

  it("its flag check tells a flag the CLI defines from one it does not", { timeout: 240_000 }, async () => {
    const rollout = await help([LEGO], ["rollout"]);
    expect(lists(rollout, "--trainer")).toBe(true);
    expect(lists(rollout, "--trainer-address")).toBe(false);
    const engine = await help([PYTHON, "-m", "lego_rl.engine"], []);
    expect(lists(engine, "--bind")).toBe(true);
    expect(lists(engine, "--binds")).toBe(false);
  });

  it("runs its test:run blocks for real, in order, each to exit status 0 and its expected output", { timeout: 1_500_000 }, async () => {
    expect(runnable.length).toBeGreaterThanOrEqual(6);
    for (const block of runnable) {
      const { code, out } = await runBlock(block, 600_000);
      expect(code, `${block.body}\n---\n${out.slice(-3000)}`).toBe(0);
      for (const [pattern, output] of EXPECTED) {
        if (block.lang === "sh" && commands(block.body).some((c) => pattern.test(c))) expect(out, `${block.body}: ${output}`).toMatch(output);
      }
    }
  });
});
