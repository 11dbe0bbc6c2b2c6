/**
 * Re-reads after edit (records.toml `TrajectoryMetrics.rereads_after_edit`):
 * how often the agent read back a file it had changed earlier in the rollout,
 * counted from the policy's own tool calls as the proxy recorded them (the
 * main thread's committed calls, in order: SessionRecords.main_tool_calls).
 *
 * Each call is classified through its harness's FileTools (declared by the
 * harness module beside the tools it configures):
 * 1. a path tool names one file by an argument: it reads it or changes it
 *    (OpenHands' file_editor by its `command`: view reads, the rest change);
 * 2. a shell tool's command line is read by shell-touches.ts (reading
 *    programs, sed -i, redirections, tee);
 * 3. where the harness intercepts `apply_patch <<'EOF'` in its shell (Codex
 *    CLI), every file the patch adds, updates or deletes is changed.
 * Paths resolve against the workspace (`calc.py` is `/workspace/calc.py`).
 * A call whose arguments are not a JSON object, or whose path is not a
 * string, touches nothing.
 *
 * The count: read calls that read at least one file changed by an earlier
 * call (or earlier in the same shell line), each call once. A read before any
 * change of that file is not a re-read.
 */
import { posix } from "node:path";
import { applyPatchChanges } from "./codex-patch.ts";
import type { ToolCallRecord } from "./report.ts";
import { shellTouches, type FileTouch } from "./shell-touches.ts";

export type { FileTouch } from "./shell-touches.ts";

/** The workspace the harnesses work in (the task repository's checkout): where relative paths resolve. */
const WORKSPACE = "/workspace";

/** A tool that names one file by an argument. */
export interface PathTool {
  name: string;
  /** The argument holding the path. */
  path: string;
  /**
   * What a call does to the file: always one thing, or chosen by the value
   * of another argument (`by`); a value in neither list touches nothing.
   */
  touch: "read" | "edit" | { by: string; read: readonly string[]; edit: readonly string[] };
}

/** A tool that runs a shell command line. */
export interface ShellTool {
  name: string;
  /** The argument holding the command line. */
  command: string;
  /** The harness applies `apply_patch <<'EOF' … EOF` itself instead of running it (Codex CLI, codex-patch.ts). */
  applyPatch?: true;
}

/** How one harness's tools touch files. */
export interface FileTools {
  paths: readonly PathTool[];
  shells: readonly ShellTool[];
}

/** The files one call reads and changes, in the order it touches them. */
export function fileTouches(tools: FileTools, call: ToolCallRecord): FileTouch[] {
  const args = call.arguments;
  const shell = tools.shells.find((t) => t.name === call.name);
  if (shell) {
    const line = args[shell.command];
    if (typeof line !== "string") return [];
    const patch = shell.applyPatch ? applyPatchChanges(line, WORKSPACE) : null;
    return patch ? patch.map((c) => ({ kind: "edit", path: c.path })) : shellTouches(line, WORKSPACE);
  }
  const touches: FileTouch[] = [];
  for (const t of tools.paths.filter((t) => t.name === call.name)) {
    const path = args[t.path];
    const kind = typeof t.touch === "string" ? t.touch : touchBy(t.touch, args[t.touch.by]);
    if (typeof path === "string" && path !== "" && kind) touches.push({ kind, path: resolveInWorkspace(path) });
  }
  return touches;
}

function touchBy(touch: { read: readonly string[]; edit: readonly string[] }, value: unknown): FileTouch["kind"] | null {
  if (typeof value !== "string") return null;
  return touch.read.includes(value) ? "read" : touch.edit.includes(value) ? "edit" : null;
}

/** Normalised as shell paths are (posix.resolve), so a tool's path and a shell's meet. */
const resolveInWorkspace = (path: string) => posix.resolve(WORKSPACE, path);

/** The calls, in order, that read a file an earlier call (or an earlier command of the same call) changed. */
export function rereadsAfterEdit(tools: FileTools, calls: readonly ToolCallRecord[]): number {
  const changed = new Set<string>();
  let rereads = 0;
  for (const call of calls) {
    let reread = false;
    for (const t of fileTouches(tools, call)) {
      if (t.kind === "edit") changed.add(t.path);
      else if (changed.has(t.path)) reread = true;
    }
    if (reread) rereads += 1;
  }
  return rereads;
}
