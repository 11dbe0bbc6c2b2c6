/**
 * Re-reads after edit, per harness tool vocabulary (each harness's own
 * FileTools), and the shell reader under it: what a call reads, what it
 * changes, and which reads count.
 */
import { describe, expect, it } from "vitest";
import { MODEL_NAME, qwen3, qwen3ToolCall, scriptedEngine, startProxy } from "../proxy/test-support.ts";
import { parseCompletion } from "../proxy/index.ts";
import { loadTask } from "../sandbox/index.ts";
import { fileTouches, goldScript, HARNESS_TOOLS, rereadsAfterEdit, rolloutSession, type FileTools, type ToolCallRecord } from "./index.ts";
import { shellTouches } from "./shell-touches.ts";
import { EDIT_KINDS_TASK } from "./test-support.ts";

const toolsOf = (harness: string): FileTools => HARNESS_TOOLS[harness]!.harness.fileTools;
const call = (name: string, args: Record<string, unknown>): ToolCallRecord => ({ name, arguments: args });
const W = "/workspace";

describe("rereadsAfterEdit", () => {
  const ref = toolsOf("reference");
  const write = call("write_file", { path: "calc.py", content: "x = 1\n" });
  const read = call("read_file", { path: "/workspace/calc.py" });

  it("counts a read of a file an earlier call changed (the relative and the absolute path are the same file)", () => {
    expect(rereadsAfterEdit(ref, [write, read])).toBe(1);
  });

  it("does not count a read before the file's first change", () => {
    expect(rereadsAfterEdit(ref, [read, call("edit_file", { path: "calc.py", old_str: "1", new_str: "2" })])).toBe(0);
  });

  it("counts each read call after the change once, whatever tool reads", () => {
    expect(rereadsAfterEdit(ref, [read, write, read, call("bash", { command: "cat calc.py && head -n 3 ./calc.py" })])).toBe(2);
  });

  it("does not count a read of another file", () => {
    expect(rereadsAfterEdit(ref, [write, call("read_file", { path: "calc_test.py" })])).toBe(0);
  });

  it("ignores a call whose arguments did not parse as an object, and one whose path is not a string", () => {
    expect(rereadsAfterEdit(ref, [write, call("read_file", { $raw: "{not json" }), call("read_file", { path: 7 })])).toBe(0);
  });

  it("counts a change and its read within one shell line", () => {
    expect(rereadsAfterEdit(ref, [call("bash", { command: "sed -i 's/1/2/' calc.py && cat calc.py" })])).toBe(1);
  });
});

describe("each harness's tools", () => {
  it("claude-code: Edit and Write change file_path, Read and Bash's cat read it", () => {
    const t = toolsOf("claude-code");
    expect(rereadsAfterEdit(t, [
      call("Read", { file_path: `${W}/calc.py` }),
      call("Edit", { file_path: `${W}/calc.py`, old_string: "a", new_string: "b", replace_all: false }),
      call("Read", { file_path: `${W}/calc.py` }),
      call("Write", { file_path: `${W}/new.py`, content: "" }),
      call("Bash", { command: "cat new.py" }),
    ])).toBe(2);
  });

  it("opencode: edit and write change filePath, read reads it", () => {
    const t = toolsOf("opencode");
    expect(rereadsAfterEdit(t, [call("edit", { filePath: "calc.py", oldString: "a", newString: "b" }), call("read", { filePath: `${W}/calc.py` })])).toBe(1);
    expect(rereadsAfterEdit(t, [call("write", { filePath: `${W}/n.py`, content: "" }), call("bash", { command: "wc -l n.py", description: "count" })])).toBe(1);
  });

  it("openhands: file_editor views or changes path by its command; terminal reads through the shell", () => {
    const t = toolsOf("openhands");
    const editor = (command: string, extra: Record<string, unknown> = {}) => call("file_editor", { command, path: `${W}/calc.py`, ...extra });
    expect(fileTouches(t, editor("view"))).toEqual([{ kind: "read", path: `${W}/calc.py` }]);
    for (const c of ["create", "str_replace", "insert", "undo_edit"]) expect(fileTouches(t, editor(c))).toEqual([{ kind: "edit", path: `${W}/calc.py` }]);
    expect(fileTouches(t, editor("unknown"))).toEqual([]);
    expect(rereadsAfterEdit(t, [editor("view"), editor("str_replace", { old_str: "a", new_str: "b" }), editor("view"), call("terminal", { command: "grep -n max calc.py" })])).toBe(2);
  });

  it("codex: an apply_patch heredoc through exec_command changes what it adds, updates or deletes; a later sed -n reads", () => {
    const t = toolsOf("codex");
    const patch = call("exec_command", { cmd: "apply_patch <<'PATCH'\n*** Begin Patch\n*** Update File: calc.py\n@@\n-a\n+b\n*** Add File: /workspace/n.py\n+x\n*** End Patch\nPATCH" });
    expect(fileTouches(t, patch)).toEqual([{ kind: "edit", path: `${W}/calc.py` }, { kind: "edit", path: `${W}/n.py` }]);
    expect(rereadsAfterEdit(t, [patch, call("exec_command", { cmd: "sed -n '1,20p' calc.py" })])).toBe(1);
  });

  it("mini-swe-agent: sed -i is a change, not a read; cat after it is a re-read", () => {
    const t = toolsOf("mini-swe-agent");
    const sed = call("bash", { command: "sed -i 's/a/b/' calc.py" });
    expect(rereadsAfterEdit(t, [sed, sed])).toBe(0);
    expect(rereadsAfterEdit(t, [sed, sed, call("bash", { command: "cat calc.py" })])).toBe(1);
  });
});

describe("the scripted-gold scripts of every harness (edit-kinds fixture)", () => {
  const task = loadTask(EDIT_KINDS_TASK);
  const callsOf = (harness: string, extra: string[] = []): ToolCallRecord[] =>
    [...goldScript(task, HARNESS_TOOLS[harness]!.tools), ...extra.map((text) => ({ text }))]
      .flatMap((r) => ("text" in r ? parseCompletion(r.text, "qwen3_json", []).calls : []))
      .map((c) => call(c.name, JSON.parse(c.arguments) as Record<string, unknown>));
  const catClamp = (harness: string) => {
    const shell = HARNESS_TOOLS[harness]!.tools.shell;
    return qwen3ToolCall(shell.name, { [shell.command]: "cat clamp.py" });
  };

  it.each(Object.keys(HARNESS_TOOLS))("%s: gold (edit, then submit) re-reads nothing; a cat of the edited file after it is one re-read", (harness) => {
    const tools = toolsOf(harness);
    expect(rereadsAfterEdit(tools, callsOf(harness))).toBe(0);
    // mini-swe-agent edits through python3 heredocs, which this reader does not see into: no edit seen, so no re-read.
    expect(rereadsAfterEdit(tools, callsOf(harness, [catClamp(harness)]))).toBe(harness === "mini-swe-agent" ? 0 : 1);
  });
});

describe("shellTouches", () => {
  const touches = (line: string) => shellTouches(line, W).map((t) => `${t.kind} ${t.path}`);

  it.each([
    ["cat a.py", ["read /workspace/a.py"]],
    ["head -n 20 a.py", ["read /workspace/a.py"]],
    ["tail -5 src/a.py", ["read /workspace/src/a.py"]],
    ["nl a.py | less", ["read /workspace/a.py"]],
    ["grep -n 'def f' a.py b.py", ["read /workspace/a.py", "read /workspace/b.py"]],
    ["grep -rn -e clamp a.py", ["read /workspace/a.py"]],
    ["diff -u a.py /tmp/b.py", ["read /workspace/a.py", "read /tmp/b.py"]],
    ["wc -l < a.py", ["read /workspace/a.py"]],
    ["sed -n '1,5p' a.py", ["read /workspace/a.py"]],
    ["sed -i.bak -e 's/x/y/' a.py", ["edit /workspace/a.py"]],
    ["sed --in-place 's/x/y/' a.py", ["edit /workspace/a.py"]],
    ["echo hi > out.txt; echo again >> out.txt", ["edit /workspace/out.txt", "edit /workspace/out.txt"]],
    ["printf x | tee -a log.txt", ["edit /workspace/log.txt"]],
    ["cat a.py > b.py", ["read /workspace/a.py", "edit /workspace/b.py"]],
    ["cat a.py 2>/dev/null | wc -l", ["read /workspace/a.py"]],
    ["cd src && cat a.py", ["read /workspace/src/a.py"]],
    ["cd /tmp; cat ../workspace/a.py", ["read /workspace/a.py"]],
    ["bash -lc \"cat 'my file.py'\"", ["read /workspace/my file.py"]],
    ["echo $(cat a.py)", ["read /workspace/a.py"]],
    ["FOO=1 cat ./a.py", ["read /workspace/a.py"]],
  ])("%s", (line, expected) => {
    expect(touches(line)).toEqual(expected);
  });

  it("skips a heredoc's body: its lines are text, not commands", () => {
    expect(touches("cat > new.py <<'EOF'\ncat a.py\nEOF\ncat new.py")).toEqual(["edit /workspace/new.py", "read /workspace/new.py"]);
    expect(touches("python3 - <<'END'\nopen('a.py', 'w').write('x')\nEND")).toEqual([]);
  });

  it("sees nothing it cannot read with confidence: other programs, expansions, globs, a broken quote", () => {
    for (const line of ["python3 -c \"print(open('a.py').read())\"", "git diff a.py", "cp a.py b.py", "cat $F", "cat *.py", "cat ~/a.py", "cat 'a.py", "echo 'cat a.py'"])
      expect(touches(line), line).toEqual([]);
  });
});

describe("rolloutSession", () => {
  it("counts from the proxy's committed main-thread calls: a rolled-back turn's edit is not an edit", async () => {
    const proxy = await startProxy(scriptedEngine(qwen3(), [
      { text: qwen3ToolCall("write_file", { path: "calc.py", content: "x = 1\n" }) },
      { text: qwen3ToolCall("read_file", { path: "calc.py" }) },
    ]));
    try {
      const session = proxy.createSession("s");
      const messages = [{ role: "system", content: "Agent." }, { role: "user", content: "Fix calc.py." }];
      const tools = ["write_file", "read_file"].map((name) => ({ type: "function", function: { name, parameters: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } } } } }));
      // The same request twice: a retry, so the turn that wrote calc.py is rolled back.
      for (let i = 0; i < 2; i++) {
        const res = await fetch(`${session.baseUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${session.secret}` }, body: JSON.stringify({ model: MODEL_NAME, messages, tools }) });
        expect(res.status).toBe(200);
      }
      const records = proxy.closeSession(session.id);
      expect(records.counters).toMatchObject({ tool_calls: 1, rolled_back_turns: 1 });
      expect(rolloutSession(records, toolsOf("reference")).rereadsAfterEdit).toBe(0);
      records.main_tool_calls.unshift({ name: "write_file", arguments: JSON.stringify({ path: "/workspace/calc.py", content: "" }) });
      expect(rolloutSession(records, toolsOf("reference")).rereadsAfterEdit).toBe(1);
    } finally {
      await proxy.close();
    }
  });
});
