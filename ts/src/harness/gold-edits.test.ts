/**
 * The gold patch as editor steps (gold-edits.ts) and as each harness's tool
 * calls (engines.ts goldScript): every kind of change of the edit-kinds
 * fixture, an old text widened until unique, the replacements applied in
 * order giving exactly what `git apply` gives, and patches that cannot be
 * said as edits refused with the reason.
 */
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadTask, type TaskDefinition } from "../sandbox/index.ts";
import { GoldPatchError, HARNESS_TOOLS, HarnessEngineError, applyPatchChanges, goldPatchText, goldScript, goldSteps, type GoldStep } from "./index.ts";
import { EDIT_KINDS_TASK } from "./test-support.ts";

const work = mkdtempSync(join(tmpdir(), "lego-gold-edits-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A task folder whose environment holds `files` (as repo/, or as repo.tar) and whose gold patch is `patch`. */
function taskWith(name: string, files: Record<string, string>, patch: string, layout: "repo" | "repo.tar" = "repo"): TaskDefinition {
  const dir = join(work, name);
  cpSync(EDIT_KINDS_TASK, dir, { recursive: true });
  rmSync(join(dir, "environment/repo"), { recursive: true });
  const repo = join(dir, layout === "repo" ? "environment/repo" : "repo-src");
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(repo, path, ".."), { recursive: true });
    writeFileSync(join(repo, path), text);
  }
  if (layout === "repo.tar") execFileSync("tar", ["-cf", join(dir, "environment/repo.tar"), "-C", repo, ...Object.keys(files)]);
  writeFileSync(join(dir, "solution/gold.patch"), patch);
  return loadTask(dir);
}

/** Applies replace/create/delete steps to a copy of `files` the way an editor would (old text exactly once). */
function applySteps(files: Record<string, string>, steps: GoldStep[]): Record<string, string> {
  const out = { ...files };
  for (const s of steps) {
    if (s.kind === "create") out[s.path] = s.content;
    else if (s.kind === "delete") delete out[s.path];
    else {
      const text = out[s.path]!;
      expect(text.split(s.old).length - 1).toBe(1);
      out[s.path] = text.replace(s.old, () => s.new);
    }
  }
  return out;
}

/** What `git apply` makes of `files` with `patch`. */
function gitApply(files: Record<string, string>, patch: string): Record<string, string> {
  const dir = mkdtempSync(join(work, "git-"));
  for (const [p, t] of Object.entries(files)) writeFileSync(join(dir, p), t);
  writeFileSync(join(dir, "..", "p.patch"), patch);
  execFileSync("git", ["apply", join(dir, "..", "p.patch")], { cwd: dir });
  const names = execFileSync("ls", ["-A", dir], { encoding: "utf8" }).split("\n").filter(Boolean);
  return Object.fromEntries(names.map((n) => [n, readFileSync(join(dir, n), "utf8")]));
}

describe("the gold patch as editor steps", () => {
  const task = loadTask(EDIT_KINDS_TASK);
  const base = Object.fromEntries(["clamp.py", "legacy.py"].map((p) => [p, readFileSync(join(EDIT_KINDS_TASK, "environment/repo", p), "utf8")]));

  it("edit-kinds: two replacements (the first widened by a line each side until unique), a delete and a create, giving what git apply gives", () => {
    const steps = goldSteps(task, goldPatchText(task)!);
    expect(steps.map((s) => `${s.kind} ${s.path}`)).toEqual(["replace clamp.py", "replace clamp.py", "delete legacy.py", "create units.py"]);
    const [first, second] = steps as Array<GoldStep & { kind: "replace" }>;
    // The hunk's own old text (context + removed) occurs in low() and in high(): widened to the def line and the blank line after.
    expect(first!.widenedBy).toBe(2);
    expect(first!.old.startsWith("def low(v):\n")).toBe(true);
    expect(second!.widenedBy).toBe(0); // by then low() no longer holds it
    expect(applySteps(base, steps)).toEqual(gitApply(base, goldPatchText(task)!));
  });

  it("a file without a final newline, a `$&` in the new text, the base read from repo.tar", () => {
    const files = { "a.py": "x = 1\ny = 2\nz = 3" };
    const patch = ["--- a/a.py", "+++ b/a.py", "@@ -1,3 +1,3 @@", " x = 1", " y = 2", "-z = 3", "\\ No newline at end of file", "+z = '$&'", "\\ No newline at end of file", ""].join("\n");
    const steps = goldSteps(taskWith("no-newline", files, patch, "repo.tar"), patch);
    expect(steps).toMatchObject([{ kind: "replace", old: "x = 1\ny = 2\nz = 3", new: "x = 1\ny = 2\nz = '$&'" }]);
    expect(applySteps(files, steps)).toEqual(gitApply(files, patch));
  });

  it("refuses what is not a text edit or does not apply, saying which task, file and hunk", () => {
    const files = { "a.py": "a\nb\nc\n" };
    const stale = ["--- a/a.py", "+++ b/a.py", "@@ -1,3 +1,3 @@", " a", "-B", "+b2", " c", ""].join("\n");
    expect(() => goldSteps(taskWith("stale", files, stale), stale)).toThrow(/gold\.patch, a\.py, hunk 1: its old lines are not at line 1/);
    const rename = ["diff --git a/a.py b/b.py", "similarity index 100%", "rename from a.py", "rename to b.py", "--- a/a.py", "+++ b/b.py", ""].join("\n");
    expect(() => goldSteps(taskWith("rename", files, rename), rename)).toThrow(GoldPatchError);
    const binary = ["diff --git a/x.bin b/x.bin", "index 1..2 100644", "GIT binary patch", "literal 1", "Hc$@<O00001", "", ""].join("\n");
    expect(() => goldSteps(taskWith("binary", files, binary), binary)).toThrow(/binary|no hunk/);
    const twins = { "t.py": "k\nk\nk\nk\n" };
    const whole = ["--- a/t.py", "+++ b/t.py", "@@ -1,2 +1,2 @@", "-k", "+j", " k", ""].join("\n");
    // At the file's top it can widen only downwards: to the whole file, which occurs once.
    expect(goldSteps(taskWith("twins", twins, whole), whole)).toMatchObject([{ old: "k\nk\nk\nk\n", new: "j\nk\nk\nk\n", widenedBy: 2 }]);
    expect(() => goldScript(taskWith("stale2", files, stale), HARNESS_TOOLS.reference!.tools)).toThrow(HarnessEngineError);
  });
});

describe("scripted-gold says the steps with each harness's own tools", () => {
  const task = loadTask(EDIT_KINDS_TASK);
  const calls = (harness: string) => goldScript(task, HARNESS_TOOLS[harness]!.tools).map((r) => {
    const m = /^<tool_call>\n(.*)\n<\/tool_call>$/s.exec("text" in r ? r.text : "");
    return m ? (JSON.parse(m[1]!) as { name: string; arguments: Record<string, unknown> }) : { name: "(answer)", arguments: {} };
  });

  it("Claude Code: Read once per file before its first Edit; Edit with replace_all; Edit with an empty old_string creates; Bash removes", () => {
    const c = calls("claude-code");
    expect(c.map((x) => x.name)).toEqual(["Read", "Edit", "Edit", "Bash", "Edit", "(answer)"]);
    expect(c[0]!.arguments).toEqual({ file_path: "/workspace/clamp.py" });
    expect(c[1]!.arguments).toMatchObject({ replace_all: false, file_path: "/workspace/clamp.py" });
    expect(c[3]!.arguments).toEqual({ command: "rm -- '/workspace/legacy.py'" });
    expect(c[4]!.arguments).toEqual({ replace_all: false, old_string: "", file_path: "/workspace/units.py", new_string: "PERCENT = 100\n" });
  });

  it("OpenHands: file_editor str_replace and create (no mkdir at the workspace's top), terminal removes, finish", () => {
    const c = calls("openhands");
    expect(c.map((x) => `${x.name} ${x.arguments["command"]}`.split(" ").slice(0, 2).join(" "))).toEqual(
      ["file_editor str_replace", "file_editor str_replace", "terminal rm", "file_editor create", "finish undefined"]);
  });

  it("Codex CLI: one apply_patch heredoc per step in its own format, through exec_command", () => {
    const c = calls("codex");
    expect(c.map((x) => x.name)).toEqual(["exec_command", "exec_command", "exec_command", "exec_command", "(answer)"]);
    const cmd = String(c[0]!.arguments["cmd"]);
    expect(cmd).toMatch(/^apply_patch <<'PATCH'\n\*\*\* Begin Patch\n\*\*\* Update File: clamp\.py\n@@\n def low\(v\):\n/);
    expect(cmd.endsWith("*** End Patch\nPATCH")).toBe(true);
    expect(c.slice(0, 4).map((x) => applyPatchChanges(String(x.arguments["cmd"]), "/workspace"))).toEqual([
      [{ path: "/workspace/clamp.py", kind: "update" }], [{ path: "/workspace/clamp.py", kind: "update" }],
      [{ path: "/workspace/legacy.py", kind: "delete" }], [{ path: "/workspace/units.py", kind: "add" }],
    ]);
  });

  it("mini-swe-agent (bash only): its python3 replacements, run here, edit exactly as git apply does, and refuse an old text not there once", () => {
    const c = calls("mini-swe-agent");
    expect(c.map((x) => String(x.arguments["command"]).split(" ")[0])).toEqual(["python3", "python3", "rm", "mkdir", "echo"]);
    const dir = mkdtempSync(join(work, "mini-"));
    const base = readFileSync(join(EDIT_KINDS_TASK, "environment/repo/clamp.py"), "utf8");
    writeFileSync(join(dir, "clamp.py"), base);
    const run = (cmd: string) => execFileSync("bash", ["-c", cmd.replaceAll("/workspace/", `${dir}/`)], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    for (const x of c.slice(0, 2)) expect(run(String(x.arguments["command"]))).toBe(`edited ${dir}/clamp.py\n`);
    const patched = gitApply({ "clamp.py": base }, goldPatchText(task)!.split("diff --git a/legacy.py")[0]!);
    expect(readFileSync(join(dir, "clamp.py"), "utf8")).toBe(patched["clamp.py"]);
    expect(() => run(String(c[0]!.arguments["command"]))).toThrow(/the old text occurs 0 times, not once/);
  });
});
