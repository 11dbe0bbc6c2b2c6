/** The demo's task family and demonstrations: `easy:template=comparison,module=calc` and the scripted-edit engine. */
import { cpSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { HARNESS_TOOLS, HarnessEngineError, editScript } from "../harness/index.ts";
import { TaskSourceError, openTaskSource, type Task } from "../tasks/index.ts";
import { easySuite } from "../tasks/index.ts";
import { DEMO_TASKS, EVAL_TASKS, TRAIN_TASKS, demonstrationsDir } from "./warm-start.ts";

const work = mkdtempSync(join(tmpdir(), "lego-demo-tasks-"));
const cfg = { cacheDir: join(work, "cache"), sdistDir: join(work, "sdists"), repoRoots: [] };
const tools = HARNESS_TOOLS.reference!.tools;

describe("the demo's tasks", () => {
  it("are comparison variants of calc.py only, with held-out tasks under names no training task uses", async () => {
    const set = await openTaskSource(EVAL_TASKS, cfg);
    for (const t of set.tasks) {
      expect(t.record!.lego!.template).toBe("comparison");
      expect(t.record!.problem_statement).toMatch(/`calc\.py`/);
      expect(t.record!.problem_statement).toMatch(/`\w+\((\d), \1\)`.* `True`/);
    }
    const heldOut = set.tasks.filter((t) => t.split === "test");
    expect(heldOut.length).toBeGreaterThanOrEqual(5);
    const fn = (t: Task) => /`(\w+)\(/.exec(t.record!.problem_statement)![1]!;
    const heldOutNames = new Set(heldOut.map(fn));
    // Not only other tasks: no demonstration and no GSPO task may use a held-out function name, or the
    // evaluation would measure recall of a name seen in training instead of generalisation to a new one.
    for (const source of [DEMO_TASKS, TRAIN_TASKS]) {
      const train = await openTaskSource(source, cfg);
      expect(train.tasks.length, source).toBeGreaterThanOrEqual(24);
      expect(train.tasks.filter((t) => t.split !== "train").map((t) => t.id), source).toEqual([]);
      expect(train.tasks.map(fn).filter((n) => heldOutNames.has(n)), source).toEqual([]);
    }
  });

  it("have their demonstrations cached under the source's name and its tasks' contents: a changed task is a new folder", async () => {
    const copy = join(work, "copied-suite");
    cpSync(join(await easySuite(cfg, { seed: "5", count: "3", template: "comparison", module: "calc" }), ".."), copy, { recursive: true });
    const first = await demonstrationsDir(join(work, "cache-root"), copy, cfg);
    expect(await demonstrationsDir(join(work, "cache-root"), copy, cfg)).toBe(first);
    const jsonl = join(copy, "tasks.jsonl");
    writeFileSync(jsonl, readFileSync(jsonl, "utf8").replace("should return", "must return"));
    const changed = await demonstrationsDir(join(work, "cache-root"), copy, cfg);
    expect(changed).not.toBe(first);
    expect(changed.slice(0, -13)).toBe(first.slice(0, -13)); // same source name, another digest
  });

  it("reject an unknown template or module with the options there are", async () => {
    await expect(openTaskSource("easy:template=nope", cfg)).rejects.toThrow(TaskSourceError);
    await expect(openTaskSource("easy:template=nope", cfg)).rejects.toThrow(/known: comparison, constant, missing_return, operator/);
    await expect(openTaskSource("easy:module=os", cfg)).rejects.toThrow(/unknown module os/);
  });

  it("are demonstrated by scripted-edit as one fixed edit_file call and submit, nothing read first", async () => {
    const [task] = (await openTaskSource(DEMO_TASKS, cfg)).tasks;
    const replies = editScript(await task!.definition(), tools);
    expect(replies).toEqual([
      { text: '<tool_call>\n{"name":"edit_file","arguments":{"path":"/workspace/calc.py","old_str":"return x > limit","new_str":"return x >= limit"}}\n</tool_call>' },
      { text: '<tool_call>\n{"name":"submit","arguments":{}}\n</tool_call>' },
    ]);
  });

  it("scripted-edit refuses a patch that is not one-line replacements, and a harness without an edit tool", async () => {
    const missing = await (await openTaskSource("easy:seed=3,count=4,template=missing_return", cfg)).tasks[0]!.definition();
    expect(() => editScript(missing, tools)).toThrow(HarnessEngineError);
    expect(() => editScript(missing, tools)).toThrow(/not one-line replacements/);
    const comparison = await (await openTaskSource(DEMO_TASKS, cfg)).tasks[0]!.definition();
    expect(() => editScript(comparison, { ...tools, edit: undefined })).toThrow(/no edit tool/);
  });
});
