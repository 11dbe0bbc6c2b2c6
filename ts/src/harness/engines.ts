/**
 * Scripted engines for harness tests, benchmarks and `lego eval --engine`:
 * replies written in the model's own tool-call format (Qwen3 here), so the
 * proxy parses them into each API's tool calls exactly as it does a real
 * model's output.
 *  - scripted-gold: replays the task's gold patch through the harness's own
 *    editor (gold-edits.ts: per hunk a replacement whose old text is unique in
 *    the file, new files created, removed files deleted): its edit tool
 *    (Claude Code reads a file before its first edit, as it insists), Codex
 *    CLI's apply_patch, or for a bash-only harness a python3 replacement in a
 *    heredoc; then submits. A task without solution/gold.patch (a Harbor task
 *    whose solve.sh is a script) has no patch to replay: its solution files
 *    are written with the write tool and solve.sh run with the shell tool.
 *  - scripted-edit: the gold patch as the harness's edit tool (one call per
 *    changed line, the line's text without its indentation), then submit; it
 *    never reads a file, so it suits tasks whose fix the instruction determines
 *    (the demo's `easy:template=comparison`). A patch it cannot say as one-line
 *    replacements is an error, not a guess.
 *  - answer-at-once: a final answer with no tool call; every healthy task must score 0.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { parsePatch } from "diff";
import { ScriptedEngine, type ScriptedReply } from "../engine/index.ts";
import type { ProxyModel } from "../proxy/index.ts";
import type { TaskDefinition } from "../sandbox/index.ts";
import { applyPatchCommand, codexPatch } from "./codex-patch.ts";
import { GoldPatchError, goldPatchText, goldSteps, type GoldStep } from "./gold-edits.ts";

/** The tool names one harness gives the model for each job. */
export interface ToolNames {
  /**
   * `fixed`: arguments always passed as given (Claude Code creates a file with Edit and an empty old_string).
   * `makesParents: false`: the tool creates no missing folder (OpenHands' file_editor), so the shell makes them first.
   * Absent for a harness without a write tool (mini-swe-agent, Codex CLI without apply_patch): files are then written with the shell tool.
   */
  write?: { name: string; path: string; content: string; fixed?: Record<string, unknown>; makesParents?: false };
  /** Replace one occurrence of a string in a file; absent where the harness has no such tool. `fixed` as for write. */
  edit?: { name: string; path: string; old: string; new: string; fixed?: Record<string, unknown> };
  /** A tool the harness wants called on a file before it edits it (Claude Code refuses to edit a file it has not read). */
  readFirst?: { name: string; path: string };
  /**
   * "shell": the harness's editor is its apply_patch, reached through the
   * shell tool (Codex CLI 0.171.0 intercepts `apply_patch <<'EOF'`; codex-patch.ts says why):
   * edits, new files and deletions go as patches in its own format.
   */
  applyPatch?: "shell";
  /** `fixed`: arguments always passed (OpenCode's bash requires a description). */
  shell: { name: string; command: string; fixed?: Record<string, unknown> };
  /**
   * Absent where the harness ends on a plain answer; a tool called with no
   * arguments, or a call with its arguments (OpenHands' finish needs a message;
   * mini-swe-agent submits with a shell command).
   */
  submit?: string | { name: string; args: Record<string, unknown> };
}

export const ENGINES = ["scripted-gold", "scripted-edit", "answer-at-once"] as const;
export type EngineName = (typeof ENGINES)[number];

export class HarnessEngineError extends Error {}

export function toolCall(name: string, args: Record<string, unknown>): string {
  return `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;
}

/** Where the solution's files are written inside the container (the agent never sees the real /solution). */
const GOLD_DIR = "/tmp/lego-gold";

/** The workspace the harnesses edit (the task repository's checkout). */
const WORKSPACE = "/workspace";

/** The gold solution through the harness's tools: its gold patch as edits, else (no gold.patch) its solve.sh run. */
export function goldScript(def: TaskDefinition, tools: ToolNames): ScriptedReply[] {
  const patch = goldPatchText(def);
  if (patch === undefined) return solveScript(def, tools);
  let steps: GoldStep[];
  try {
    steps = goldSteps(def, patch);
  } catch (e) {
    // A binary change, a rename, a hunk that does not apply: said plainly, not guessed.
    if (e instanceof GoldPatchError) throw new HarnessEngineError(`scripted-gold: ${e.message}`, { cause: e });
    throw e;
  }
  const read = new Set<string>();
  return [...steps.flatMap((step) => sayStep(step, tools, read)).map((text) => ({ text })), submitReply(tools)];
}

const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

/**
 * One gold step as the harness's tool calls. `read`: files already read
 * (a harness with `readFirst` gets one read per file, before its first edit).
 */
function sayStep(step: GoldStep, tools: ToolNames, read: Set<string>): string[] {
  const path = `${WORKSPACE}/${step.path}`;
  const shell = (command: string) => toolCall(tools.shell.name, { ...tools.shell.fixed, [tools.shell.command]: command });
  if (tools.applyPatch === "shell") return [shell(applyPatchCommand(codexPatch(step)))];
  if (step.kind === "delete") return [shell(`rm -- ${quote(path)}`)];
  if (step.kind === "create") {
    if (!tools.write) return [shell(shellWrite(path, step.content))];
    const mkdir = tools.write.makesParents === false && dirname(path) !== WORKSPACE ? [shell(`mkdir -p ${quote(dirname(path))}`)] : [];
    return [...mkdir, toolCall(tools.write.name, { ...tools.write.fixed, [tools.write.path]: path, [tools.write.content]: step.content })];
  }
  if (!tools.edit) return [shell(pythonReplace(path, step.old, step.new))];
  const first = tools.readFirst && !read.has(path) ? [toolCall(tools.readFirst.name, { [tools.readFirst.path]: path })] : [];
  read.add(path);
  return [...first, toolCall(tools.edit.name, { ...tools.edit.fixed, [tools.edit.path]: path, [tools.edit.old]: step.old, [tools.edit.new]: step.new })];
}

const PY_END = "LEGO_EDIT_EOF";

/**
 * A replacement for a bash-only harness (mini-swe-agent): python3 (every task
 * image has it: the verifier runs pytest) in a quoted heredoc does what an
 * editor's str_replace does — the old text must occur exactly once, else it
 * fails saying so — byte for byte (no newline translation). Chosen over
 * `patch`: that applies hunks with offsets and fuzz (a wrong place passes
 * silently) and is not in every image. The strings are JSON literals, which
 * Python reads as its own, each on one line, so no line can end the heredoc.
 */
function pythonReplace(path: string, old: string, replacement: string): string {
  return [
    `python3 - <<'${PY_END}'`,
    `path, old, new = ${JSON.stringify(path)}, ${JSON.stringify(old)}, ${JSON.stringify(replacement)}`,
    `with open(path, encoding="utf-8", newline="") as f: text = f.read()`,
    `n = text.count(old)`,
    `if n != 1: raise SystemExit(f"{path}: the old text occurs {n} times, not once")`,
    `with open(path, "w", encoding="utf-8", newline="") as f: f.write(text.replace(old, new, 1))`,
    `print(f"edited {path}")`,
    PY_END,
  ].join("\n");
}

function submitReply(tools: ToolNames): ScriptedReply {
  if (typeof tools.submit === "string") return { text: toolCall(tools.submit, {}) };
  if (tools.submit) return { text: toolCall(tools.submit.name, tools.submit.args) };
  return { text: "Done: the fix is applied." };
}

/**
 * A task without a gold patch: every file of solution/ written with the
 * harness's write tool under GOLD_DIR, then solve.sh run with the shell tool,
 * its /solution/ paths pointed at GOLD_DIR (Harbor's solve.sh finds its files
 * at /solution).
 */
export function solveScript(def: TaskDefinition, tools: ToolNames): ScriptedReply[] {
  const dir = join(def.dir, "solution");
  let names: string[];
  try {
    names = readdirSync(dir, { recursive: true, withFileTypes: true }).filter((e) => e.isFile()).map((e) => relative(dir, join(e.parentPath, e.name))).sort();
  } catch (e) {
    throw new HarnessEngineError(`task ${def.name} has no solution/: scripted-gold has nothing to replay`, { cause: e });
  }
  if (!names.includes("solve.sh")) throw new HarnessEngineError(`task ${def.name} has no solution/solve.sh: scripted-gold has nothing to replay`);
  const shell = (command: string) => toolCall(tools.shell.name, { ...tools.shell.fixed, [tools.shell.command]: command });
  const replies: ScriptedReply[] = [];
  if (tools.write?.makesParents === false)
    replies.push({ text: shell(`mkdir -p ${[...new Set(names.map((n) => dirname(`${GOLD_DIR}/${n}`)))].join(" ")}`) });
  replies.push(...names.map((n) => {
    const path = `${GOLD_DIR}/${n}`;
    const content = readFileSync(join(dir, n), "utf8");
    if (tools.write) return { text: toolCall(tools.write.name, { ...tools.write.fixed, [tools.write.path]: path, [tools.write.content]: content }) };
    return { text: shell(shellWrite(path, content)) };
  }));
  // No clean-up of GOLD_DIR (in /tmp, not graded): Codex CLI refuses `rm -rf` under approval_policy "never".
  replies.push({ text: shell(`sed 's#/solution/#${GOLD_DIR}/#g' ${GOLD_DIR}/solve.sh | bash`) });
  replies.push(submitReply(tools));
  return replies;
}

/** solution/gold.patch as edit-tool calls: each hunk must replace lines one for one. */
export function editScript(def: TaskDefinition, tools: ToolNames): ScriptedReply[] {
  if (!tools.edit) throw new HarnessEngineError(`the harness has no edit tool: scripted-edit cannot run it`);
  let patch: string;
  try {
    patch = readFileSync(join(def.dir, "solution/gold.patch"), "utf8");
  } catch (e) {
    throw new HarnessEngineError(`task ${def.name} has no solution/gold.patch: scripted-edit has nothing to replay`, { cause: e });
  }
  const edit = tools.edit;
  const replies: ScriptedReply[] = [];
  for (const file of parsePatch(patch)) {
    const path = (file.newFileName ?? "").replace(/^b\//, "");
    for (const hunk of file.hunks) {
      const removed = hunk.lines.filter((l) => l.startsWith("-")).map((l) => l.slice(1).trim());
      const added = hunk.lines.filter((l) => l.startsWith("+")).map((l) => l.slice(1).trim());
      if (!path || removed.length !== added.length || !removed.length || removed.some((l) => !l))
        throw new HarnessEngineError(`task ${def.name}: its gold patch is not one-line replacements (${path || "no file"}), scripted-edit cannot say it`);
      removed.forEach((old, i) => replies.push({ text: toolCall(edit.name, { ...edit.fixed, [edit.path]: `${WORKSPACE}/${path}`, [edit.old]: old, [edit.new]: added[i] }) }));
    }
  }
  replies.push(submitReply(tools));
  return replies;
}

const HEREDOC_END = "LEGO_GOLD_EOF";

/** A shell command that writes `content` to `path` byte for byte: a quoted heredoc where it can, base64 where it cannot. */
function shellWrite(path: string, content: string): string {
  const mkdir = `mkdir -p "$(dirname ${quote(path)})" && `;
  if (content.endsWith("\n") && !content.split("\n").includes(HEREDOC_END)) return `${mkdir}cat > ${quote(path)} <<'${HEREDOC_END}'\n${content}${HEREDOC_END}`;
  return `${mkdir}echo '${Buffer.from(content).toString("base64")}' | base64 -d > ${quote(path)}`;
}

/** What a scripted engine answers a call that offers no tools (a title request and the like). */
export const SIDE_REPLY = "Fix the task";

export const ANSWER_AT_ONCE: ScriptedReply[] = [{ text: "I cannot help with that; no changes made." }];

/** A scripted engine for one rollout of `def`; after the script, it answers plainly so no harness loops forever. */
export function scriptedHarnessEngine(name: string, model: ProxyModel, def: TaskDefinition, tools: ToolNames): ScriptedEngine {
  let script: ScriptedReply[];
  if (name === "scripted-gold") script = goldScript(def, tools);
  else if (name === "scripted-edit") script = editScript(def, tools);
  else if (name === "answer-at-once") script = ANSWER_AT_ONCE;
  else throw new HarnessEngineError(`unknown engine ${JSON.stringify(name)} (known: ${ENGINES.join(", ")})`);
  return scriptedToolEngine(model, script);
}

/** An engine that answers the calls offering tools with `script`, in order, then "Done."; the others with SIDE_REPLY. */
export function scriptedToolEngine(model: ProxyModel, script: ScriptedReply[]): ScriptedEngine {
  // The script advances only on calls that offer tools: a harness's hidden calls
  // (OpenCode's title generation) offer none and get a short plain reply, so they
  // neither take a step of the script nor end the rollout early.
  let step = 0;
  return new ScriptedEngine({
    script: (call) => {
      if (!model.tokenizer.decode(Array.from(call.prompt_ids)).includes("<tools>")) return { text: SIDE_REPLY };
      return script[step++] ?? { text: "Done." };
    },
    encode: (t) => model.tokenizer.encode(t),
    endOfTurnId: model.codec.endOfTurnId,
  });
}
