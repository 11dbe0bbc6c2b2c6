/**
 * A task's gold patch (solution/gold.patch, a unified diff) as the steps an
 * agent with an editor takes: per hunk a string replacement, each new file a
 * create, each removed file a delete. The scripted-gold engine says these
 * steps with each harness's own tools (engines.ts).
 *
 * A replacement's old text is the hunk's context and removed lines, its new
 * text the context and added lines. Editors refuse an old text that occurs
 * more than once (str_replace, Claude Code's Edit, OpenCode's edit), or apply
 * it at the first place it matches (Codex's apply_patch), so the old text is
 * made unique in the file as it stands when the step runs (earlier hunks
 * applied): while it occurs twice, it is widened by a line of the file on each
 * side of the hunk's place. That needs the file's text before the patch; the
 * task's overlay has it (every mined and easy task's changed file), else the
 * environment's repository (repo.tar, or a fixture's repo/ folder). A file
 * found nowhere keeps the hunk's own context, unchecked.
 */
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parsePatch, type StructuredPatch } from "diff";
import type { TaskDefinition } from "../sandbox/index.ts";

export class GoldPatchError extends Error {}

/** One line of a hunk: kept (` `), removed (`-`) or added (`+`), without its newline; `noNewline`: the file ends with it, unterminated. */
export interface HunkLine {
  op: " " | "-" | "+";
  text: string;
  noNewline?: true;
}

export type GoldStep =
  | { kind: "create"; path: string; content: string }
  | { kind: "delete"; path: string }
  /**
   * `lines`: the hunk, widened by `widenedBy` kept lines where the old text was
   * not unique; `old`/`new`: its two sides as text (the newline of a last line
   * the file ends without is left out).
   */
  | { kind: "replace"; path: string; lines: HunkLine[]; old: string; new: string; widenedBy: number };

/** The gold patch's text, or undefined when the task has none (a Harbor task whose solve.sh is a script). */
export function goldPatchText(def: TaskDefinition): string | undefined {
  const file = join(def.dir, "solution/gold.patch");
  return existsSync(file) ? readFileSync(file, "utf8") : undefined;
}

/** The steps of a gold patch, in the patch's order; paths are relative to the workspace. */
export function goldSteps(def: TaskDefinition, patch: string): GoldStep[] {
  const base = baseFiles(def);
  const steps: GoldStep[] = [];
  let files: StructuredPatch[];
  try {
    files = parsePatch(patch);
  } catch (e) {
    throw new GoldPatchError(`task ${def.name}: solution/gold.patch is not a unified diff (${(e as Error).message})`, { cause: e });
  }
  for (const file of files) {
    const oldPath = stripPrefix(file.oldFileName, "a/");
    const newPath = stripPrefix(file.newFileName, "b/");
    const where = `task ${def.name}: gold.patch, ${newPath ?? oldPath ?? "a file without a name"}`;
    if (file.isBinary) throw new GoldPatchError(`${where}: a binary change has no text to edit`);
    if (newPath === undefined && oldPath === undefined) throw new GoldPatchError(`${where}: names no file`);
    if (oldPath === undefined) {
      steps.push({ kind: "create", path: newPath!, content: sideText(file.hunks.flatMap((h) => hunkLines(h.lines)), "+") });
      continue;
    }
    if (newPath === undefined) {
      steps.push({ kind: "delete", path: oldPath });
      continue;
    }
    if (oldPath !== newPath) throw new GoldPatchError(`${where}: a rename (from ${oldPath}) is not a text edit; scripted-gold does not say it`);
    if (!file.hunks.length) throw new GoldPatchError(`${where}: no hunk (a mode change alone is not a text edit)`);
    let text = base(oldPath);
    let delta = 0;
    for (const [i, hunk] of file.hunks.entries()) {
      const step = replaceStep(oldPath, hunk.lines, text, hunk.oldStart - 1 + delta, `${where}, hunk ${i + 1}`);
      steps.push(step);
      delta += hunk.newLines - hunk.oldLines;
      // A function, so `$&` and the like in the new text are not replacement patterns.
      if (text !== undefined) text = text.replace(step.old, () => step.new);
    }
  }
  return steps;
}

const stripPrefix = (name: string | undefined, prefix: string): string | undefined =>
  name === undefined || name === "/dev/null" ? undefined : name.startsWith(prefix) ? name.slice(prefix.length) : name;

/** A hunk's lines, each "\\ No newline at end of file" marker folded into the line before it. */
function hunkLines(raw: string[]): HunkLine[] {
  const out: HunkLine[] = [];
  for (const l of raw) {
    if (l.startsWith("\\")) {
      if (out.length) out[out.length - 1]!.noNewline = true;
    } else out.push({ op: l[0] as HunkLine["op"], text: l.slice(1) });
  }
  return out;
}

/** The text of one side of a hunk: its kept lines and those of `op`. */
function sideText(lines: HunkLine[], op: "+" | "-"): string {
  return lines.filter((l) => l.op === " " || l.op === op).map((l) => (l.noNewline ? l.text : `${l.text}\n`)).join("");
}

/** Occurrences of `needle` in `text`, overlapping ones too (an editor's "exactly once" is stricter than a non-overlapping count); counting stops at 2. */
function occurrences(text: string, needle: string): number {
  let n = 0;
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + 1)) if (++n > 1) return n;
  return n;
}

function replaceStep(path: string, raw: string[], text: string | undefined, start: number, where: string): GoldStep & { kind: "replace" } {
  let lines = hunkLines(raw);
  const sides = () => ({ old: sideText(lines, "-"), new: sideText(lines, "+") });
  if (text === undefined) return { kind: "replace", path, lines, ...sides(), widenedBy: 0 };
  const fileLines = text.split("\n");
  // A file ending in a newline splits into a last empty "line": not one to widen by.
  const last = text.endsWith("\n") ? fileLines.length - 1 : fileLines.length;
  const oldLines = lines.filter((l) => l.op !== "+").map((l) => l.text);
  // The hunk's place in the file as it stands; a git patch on the task's own base puts it exactly there.
  if (oldLines.length === 0) throw new GoldPatchError(`${where}: a hunk without old lines (no context) has nothing for an edit to find`);
  if (fileLines.slice(start, start + oldLines.length).join("\n") !== oldLines.join("\n"))
    throw new GoldPatchError(`${where}: its old lines are not at line ${start + 1} of the file (the patch does not apply to the task's base)`);
  let [before, after, widenedBy] = [start, start + oldLines.length, 0];
  while (occurrences(text, sides().old) > 1) {
    // The whole file occurs once, so widening ends by then; this guards the loop, it does not fire.
    if (before === 0 && after >= last) throw new GoldPatchError(`${where}: its old text is not unique even as the whole file`);
    if (before > 0) lines = [{ op: " ", text: fileLines[--before]! }, ...lines];
    if (after < last) {
      const line: HunkLine = { op: " ", text: fileLines[after]! };
      if (++after === fileLines.length) line.noNewline = true;
      lines = [...lines, line];
    }
    widenedBy = start - before + (after - start - oldLines.length);
  }
  return { kind: "replace", path, lines, ...sides(), widenedBy };
}

/**
 * Where a file's text before the patch is found: the overlay, then the
 * environment's repository (repo.tar, read with the system's tar: one file,
 * synchronously, so a scripted engine is made as before), then a fixture's
 * repo/ folder; undefined when none has it.
 */
function baseFiles(def: TaskDefinition): (path: string) => string | undefined {
  return (path) => {
    const overlaid = def.overlay?.files.find((f) => f.path === path);
    if (overlaid) return Buffer.from(overlaid.content).toString("utf8");
    const archive = join(def.environment.dir, "repo.tar");
    if (existsSync(archive)) {
      try {
        return execFileSync("tar", ["-xOf", archive, "--", path], { encoding: "utf8", maxBuffer: 64 << 20, stdio: ["ignore", "pipe", "ignore"] });
      } catch (e) {
        // tar exits non-zero for a path the archive does not hold; a tar that did not run is an error.
        if (typeof (e as { status?: unknown }).status !== "number") throw e;
        return undefined;
      }
    }
    const folder = join(def.environment.dir, "repo", path);
    return existsSync(folder) ? readFileSync(folder, "utf8") : undefined;
  };
}
