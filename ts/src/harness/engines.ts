/**
 * Scripted engines for harness tests, benchmarks and `lego eval --engine`:
 * replies written in the model's own tool-call format (Qwen3 here), so the
 * proxy parses them into each API's tool calls exactly as it does a real
 * model's output.
 *  - scripted-gold: replays the task's gold solution through the harness's
 *    own tools (write the solution script with the write tool, run it with
 *    the shell tool), then submits.
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

/** The tool names one harness gives the model for each job. */
export interface ToolNames {
  /**
   * `fixed`: arguments always passed as given (Claude Code creates a file with Edit and an empty old_string).
   * `makesParents: false`: the tool creates no missing folder (OpenHands' file_editor), so the shell makes them first.
   * Absent for a harness without a write tool (mini-swe-agent, Codex CLI without apply_patch): files are then written with the shell tool.
   */
  write?: { name: string; path: string; content: string; fixed?: Record<string, unknown>; makesParents?: false };
  /** Replace one occurrence of a string in a file; absent where the harness has no such tool. */
  edit?: { name: string; path: string; old: string; new: string };
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

/**
 * Every file of solution/ written with the harness's write tool under
 * GOLD_DIR, then solve.sh run with the shell tool, its /solution/ paths
 * pointed at GOLD_DIR (Harbor's solve.sh finds its files at /solution).
 */
export function goldScript(def: TaskDefinition, tools: ToolNames): ScriptedReply[] {
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
  if (typeof tools.submit === "string") replies.push({ text: toolCall(tools.submit, {}) });
  else if (tools.submit) replies.push({ text: toolCall(tools.submit.name, tools.submit.args) });
  else replies.push({ text: "Done: the fix is applied." });
  return replies;
}

/** The workspace the harnesses edit (the task repository's checkout). */
const WORKSPACE = "/workspace";

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
      removed.forEach((old, i) => replies.push({ text: toolCall(edit.name, { [edit.path]: `${WORKSPACE}/${path}`, [edit.old]: old, [edit.new]: added[i] }) }));
    }
  }
  if (typeof tools.submit === "string") replies.push({ text: toolCall(tools.submit, {}) });
  else if (tools.submit) replies.push({ text: toolCall(tools.submit.name, tools.submit.args) });
  else replies.push({ text: "Done: the fix is applied." });
  return replies;
}

const HEREDOC_END = "LEGO_GOLD_EOF";

/** A shell command that writes `content` to `path` byte for byte: a quoted heredoc where it can, base64 where it cannot. */
function shellWrite(path: string, content: string): string {
  const mkdir = `mkdir -p "$(dirname '${path}')" && `;
  if (content.endsWith("\n") && !content.split("\n").includes(HEREDOC_END)) return `${mkdir}cat > '${path}' <<'${HEREDOC_END}'\n${content}${HEREDOC_END}`;
  return `${mkdir}echo '${Buffer.from(content).toString("base64")}' | base64 -d > '${path}'`;
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
