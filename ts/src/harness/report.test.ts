/**
 * The harness's own record, read back from a container the agent controls:
 * links, FIFOs, folders and oversized files come back as what they are
 * (bounded, never followed, never blocking), garbage and nothing become notes
 * in the HarnessReport, and the rollout's outcome is untouched; a rollout that
 * never reaches an outcome still lets its proxy session's server go (in a process
 * of its own, which must then exit by itself). The parsers
 * are checked on hostile text directly, and the Codex helpers on their edge cases.
 */
import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { fixtureImage, IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import type { AgentRunRecord, TaskDefinition } from "../sandbox/index.ts";
import { qwen3 } from "../proxy/test-support.ts";
import type { Task } from "../tasks/task.ts";
import {
  applyPatchChanges, canonicalJson, HARNESS_TOOLS, proxiedLauncher, readOwnRecord, scriptedHarnessEngine, shellWords, type Harness,
} from "./index.ts";

const run = (text: string, path: string): AgentRunRecord => ({
  exitCode: 0, timedOut: false, stdoutTail: "", stderrTail: "", files: [{ path, status: "read", text, bytes: text.length, truncated: false }],
});

describe("each harness's record parser on hostile text", () => {
  const garbage = [
    "\u0000\u00ff not json",
    "[1,2,3]",
    `${"[".repeat(200_000)}${"]".repeat(200_000)}`,
    JSON.stringify({ type: "item.completed", item: { type: "command_execution", command: 7, changes: "x" } }),
    JSON.stringify({ type: "assistant", message: { content: "not a list" } }),
    JSON.stringify({ kind: "ActionEvent", tool_call: [], action: null }),
    JSON.stringify({ event: "tool", name: ["x"], arguments: {} }),
    '{"truncated":',
  ].join("\n");

  for (const [name, { harness }] of Object.entries(HARNESS_TOOLS)) {
    it(`${name}: garbage gives no tool call, no final message and a note, never an exception`, () => {
      const own = readOwnRecord(harness.record, run(garbage, harness.record.file.path));
      expect(own.toolCalls).toEqual([]);
      expect(own.finalMessage).toBeNull();
      expect(own.notes.join("\n")).toMatch(/not JSON objects|not readable as this harness's record/);
    });
  }

  it("a missing run, file, or unreadable file is a note naming the path and why", () => {
    const reader = HARNESS_TOOLS.reference!.harness.record;
    expect(readOwnRecord(reader, undefined).notes).toEqual(["the agent stage did not run the harness to an end: no record to read"]);
    const absent: AgentRunRecord = { ...run("", reader.file.path), files: [{ path: reader.file.path, status: "absent", detail: "no such file" }] };
    expect(readOwnRecord(reader, absent).notes).toEqual([`${reader.file.path}: absent (no such file)`]);
    const cut = { ...run('{"event":"end","reason":"answer","final":"ok"}\n{"event":', reader.file.path) };
    cut.files = [{ ...(cut.files[0] as { path: string; status: "read"; text: string; bytes: number; truncated: boolean }), bytes: 9 << 20, truncated: true }];
    const own = readOwnRecord(reader, cut);
    expect(own.finalMessage).toBe("ok");
    expect(own.notes).toEqual([`${reader.file.path}: ${9 << 20} bytes, only the first ${reader.file.maxBytes} read`, "1 of 2 line(s) are not JSON objects (first: line 2), skipped"]);
  });

  it("canonicalJson sorts keys and refuses nesting past 64 levels", () => {
    expect(canonicalJson({ b: [1, { d: 2, c: null }], a: "x" })).toBe('{"a":"x","b":[1,{"c":null,"d":2}]}');
    let deep: unknown = 0;
    for (let i = 0; i < 100; i++) deep = [deep];
    expect(() => canonicalJson(deep)).toThrow(RangeError);
  });
});

describe("Codex helpers", () => {
  it("shellWords reads Codex's quoting of `bash -lc`: double quotes with escapes, single quotes, continuations; null on an open quote", () => {
    expect(shellWords(`/bin/bash -lc "printf 'a b\\\\n' && echo \\"q\\" > q.txt; echo \\$HOME \\\`x\\\`"`)).toEqual(
      ["/bin/bash", "-lc", `printf 'a b\\n' && echo "q" > q.txt; echo $HOME \`x\``]);
    expect(shellWords("a'b c'\\ d \"e\\\nf\"")).toEqual(["ab c d", "ef"]);
    expect(shellWords('bash -lc "open')).toBeNull();
    expect(shellWords("'open")).toBeNull();
  });

  it("applyPatchChanges: only a quoted heredoc to apply_patch whose delimiter closes it; paths made absolute and sorted", () => {
    const patch = "*** Begin Patch\n*** Update File: b.py\n@@\n-x\n+y\n*** Add File: /abs/a.py\n+z\n*** Delete File: c.py\n*** End Patch";
    expect(applyPatchChanges(`apply_patch <<'P'\n${patch}\nP`, "/w")).toEqual([
      { path: "/abs/a.py", kind: "add" }, { path: "/w/b.py", kind: "update" }, { path: "/w/c.py", kind: "delete" }]);
    expect(applyPatchChanges(`apply_patch <<'P'\n${patch}\nQ`, "/w")).toBeNull();
    expect(applyPatchChanges(`cat <<'P'\n${patch}\nP`, "/w")).toBeNull();
    expect(applyPatchChanges("apply_patch <<'P'", "/w")).toBeNull();
  });
});

describe("record files read back from a real container the agent shaped", () => {
  let fix: { task: TaskDefinition; image: string };
  let runner: RolloutRunner;
  beforeAll(async () => {
    const f = await fixtureImage("fix-add");
    fix = { task: f.task, image: f.image.tag };
    runner = await RolloutRunner.create({ maxAttempts: 1 });
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    await runner?.close();
    expect(await leftoverContainers()).toEqual([]);
  });

  it("a link, a link on the way, a FIFO, a folder, an oversized file, a missing one and a good one: each read as what it is, bounded", async () => {
    const script = [
      "mkdir -p /tmp/r/dir && cd /tmp/r",
      "ln -s /etc/passwd link && ln -s /etc linkdir && mkfifo fifo",
      "head -c 3145728 /dev/zero | tr '\\0' x > big",
      `printf '{"ok":1}\\n' > good`,
      "echo to-stdout; echo to-stderr >&2",
    ].join(" && ");
    const spec = (name: string) => ({ path: `/tmp/r/${name}`, maxBytes: 1 << 20 });
    const names = ["link", "linkdir/passwd", "fifo", "dir", "big", "absent", "good"];
    const outcome = await runner.run({ ...fix, rolloutId: "record-files", agent: { script, recordFiles: names.map(spec) } });
    expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 0 });
    const r = outcome.agentRun!;
    expect(r).toMatchObject({ exitCode: 0, timedOut: false, stdoutTail: "to-stdout\n", stderrTail: "to-stderr\n" });
    expect(r.files.map((f) => f.status)).toEqual(["not_a_file", "not_a_file", "not_a_file", "not_a_file", "read", "absent", "read"]);
    expect(r.files[4]).toMatchObject({ bytes: 3 << 20, truncated: true });
    expect((r.files[4] as { text: string }).text).toHaveLength(1 << 20);
    expect(r.files[6]).toMatchObject({ text: '{"ok":1}\n', truncated: false });
  }, 120_000);

  /** The reference harness's reader on a program that writes `script`'s record instead of running the agent. */
  const impostor = (script: string): Harness => ({ ...HARNESS_TOOLS.reference!.harness, program: () => ({ script }) });

  for (const [what, script, note] of [
    ["nothing", "true", /lego-trajectory\.jsonl: absent \(no such file\)/],
    ["a link to another file", "ln -s /etc/passwd /tmp/lego-trajectory.jsonl", /lego-trajectory\.jsonl: not_a_file/],
    ["binary garbage", "head -c 65536 /dev/urandom > /tmp/lego-trajectory.jsonl", /line\(s\) are not JSON objects/],
  ] as const) {
    it(`a harness that writes ${what}: the report says so in a note; the rollout's outcome stands`, async () => {
      const launcher = proxiedLauncher({ harness: impostor(script), engineName: "answer-at-once", model: qwen3(), limits: { maxTurns: 2, timeoutSec: 60 },
        engine: (model, def) => scriptedHarnessEngine("answer-at-once", model, def, HARNESS_TOOLS.reference!.tools) });
      const agent = await launcher.start({} as Task, fix.task, `impostor-${what.replace(/\W+/g, "-")}`);
      const outcome = await runner.run({ ...fix, rolloutId: `impostor-${what.replace(/\W+/g, "-")}`, agent: agent.program, proxySocket: agent.proxySocket });
      const report = await agent.finish(outcome);
      expect(outcome, outcome.log).toMatchObject({ status: "ok", reward: 0 });
      expect(report).toMatchObject({ harness: "reference", exitCode: 0, toolCalls: [], finalMessage: null, turns: 0, toolCallMismatches: [] });
      expect(report.notes.join("\n")).toMatch(note);
    }, 120_000);
  }
});

/**
 * Runs `body` in a Node.js process of its own with a reference-harness launcher builder (`launcherOf`, the
 * answer-at-once engine) and the fix-add task (`def`) in scope; resolves with its exit code, or null
 * when it was still up after 30 s: a listening proxy server nobody closes keeps a process up.
 */
function inOwnProcess(body: string): Promise<{ code: number | null; stderr: string }> {
  const here = (path: string) => JSON.stringify(new URL(path, import.meta.url).pathname);
  const script = `
    import { existsSync } from "node:fs";
    import { HARNESS_TOOLS, proxiedLauncher, scriptedHarnessEngine } from ${here("./index.ts")};
    import { fixtureTask } from ${here("../sandbox/test-support.ts")};
    import { qwen3 } from ${here("../proxy/test-support.ts")};
    const def = fixtureTask("fix-add");
    const reference = HARNESS_TOOLS.reference;
    const launcherOf = (harness) => proxiedLauncher({ harness, engineName: "answer-at-once", model: qwen3(), limits: { maxTurns: 2, timeoutSec: 60 },
      engine: (model, d) => scriptedHarnessEngine("answer-at-once", model, d, reference.tools) });
    ${body}`;
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => {
    const up = setTimeout(() => {
      child.kill("SIGKILL");
      resolve({ code: null, stderr });
    }, 30_000);
    child.on("exit", (code) => {
      clearTimeout(up);
      resolve({ code, stderr });
    });
  });
}

describe("a rollout that never reaches an outcome lets its proxy session's server go", () => {
  it("abandoned after its run threw: the process is not kept up, and the socket is gone", { timeout: 60_000 }, async () => {
    const run = await inOwnProcess(`
      const agent = await launcherOf(reference.harness).start({}, def, "abandoned");
      if (!existsSync(agent.proxySocket)) throw new Error("no proxy socket while the rollout ran");
      await agent.abandon();
      if (existsSync(agent.proxySocket)) throw new Error("the proxy socket outlived the rollout");`);
    expect(run, run.stderr).toEqual({ code: 0, stderr: expect.any(String) });
  });

  it("a harness whose program cannot be built: start fails and leaves no server keeping the process up", { timeout: 60_000 }, async () => {
    const run = await inOwnProcess(`
      const broken = { ...reference.harness, program: () => { throw new Error("no program for this task"); } };
      await launcherOf(broken).start({}, def, "unbuildable").then(
        () => { throw new Error("start succeeded"); },
        (e) => { if (!String(e.message).includes("no program for this task")) throw e; });`);
    expect(run, run.stderr).toEqual({ code: 0, stderr: expect.any(String) });
  });
});
