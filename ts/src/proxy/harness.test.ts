/**
 * The real harness binaries against the proxy, driven by the scripted engine:
 * - Claude Code (npm @anthropic-ai/claude-code): `claude -p`, ANTHROPIC_BASE_URL; with
 *   `--bare`, and with its default tool set, whose deferred tools load through ToolSearch;
 *   and against an engine whose context window its prompts outgrow;
 * - OpenCode (npm opencode-ai): `opencode run`, an @ai-sdk/openai-compatible provider.
 * The binaries are the pinned devDependencies in ts/node_modules/.bin (scripts/setup
 * installs them), so these tests never skip: a missing binary fails them.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { ScriptedCall, ScriptedReply } from "../engine/scripted.ts";
import type { ProxyServer, ProxySession } from "./server.ts";
import { checkSegment, MODEL_NAME, qwen3, qwen3ToolCall, scriptedEngine, startProxy } from "./test-support.ts";

const BIN = resolve(import.meta.dirname, "../../node_modules/.bin");
const CLAUDE = join(BIN, "claude");
const OPENCODE = join(BIN, "opencode");
/** A harness that has not finished by then has hung: the test fails rather than waits. */
const HARNESS_TIMEOUT_MS = 150_000;

/** Replies by what the prompt holds: a tool call first, a final answer once the tool result is in. */
function agentScript(toolCall: string, titleReply = "Echo hi") {
  return (call: ScriptedCall): ScriptedReply => {
    const text = qwen3().tokenizer.decode(call.prompt_ids);
    if (text.includes("<tool_response>\nhi")) return { text: "Done: the command printed hi." };
    if (text.includes("<tools>")) return { text: toolCall };
    return { text: titleReply };
  };
}

function run(cmd: string, args: string[], env: Record<string, string>, cwd: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { env: { ...process.env, ...env }, cwd, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${cmd} ${args.join(" ")} did not finish within ${HARNESS_TIMEOUT_MS} ms; stdout: ${stdout.slice(-2000)}; stderr: ${stderr.slice(-2000)}`));
    }, HARNESS_TIMEOUT_MS);
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** `claude -p ... PROMPT` against a proxy session, in a fresh HOME. */
function claude(session: ProxySession, flags: string[], prompt: string, home: string) {
  return run(
    CLAUDE,
    // The prompt last, after a flag that takes no value (--tools would take it as a tool name).
    ["-p", ...flags, "--dangerously-skip-permissions", prompt],
    {
      ANTHROPIC_BASE_URL: session.baseUrl,
      ANTHROPIC_API_KEY: session.secret,
      ANTHROPIC_MODEL: MODEL_NAME,
      ANTHROPIC_SMALL_FAST_MODEL: MODEL_NAME,
      IS_SANDBOX: "1",
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      HOME: home,
    },
    home,
  );
}

let proxy: ProxyServer | null = null;
let dir: string | null = null;
afterEach(async () => {
  await proxy?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  proxy = null;
  dir = null;
});

describe("real harness binaries through the proxy", () => {
  it("Claude Code runs Bash through a tool call to a finish", async () => {
    const engine = scriptedEngine(qwen3(), agentScript(qwen3ToolCall("Bash", { command: "echo hi", description: "print hi" })));
    proxy = await startProxy(engine);
    const session = proxy.createSession("claude");
    dir = mkdtempSync(join(tmpdir(), "lego-claude-"));
    const r = await claude(session, ["--bare", "--tools", "Bash"], "Run echo hi", dir);
    expect(r.stdout, r.stderr).toBe("Done: the command printed hi.\n");
    expect(r.code).toBe(0);
    const records = proxy.closeSession(session.id);
    expect(records.segments.map((s) => [s.thread, s.turns.length])).toEqual([["main", 2]]);
    const turns = new Map(records.turns.map((t) => [t.turn_id, t]));
    expect(checkSegment(records.segments[0]!, turns).retokenizedPolicyTokens).toBe(0);
  });

  it("Claude Code with its default tools loads a deferred tool through ToolSearch, runs it and Bash, all in one main segment", async () => {
    // ToolSearch("select:CronList") -> CronList (a deferred tool) -> Bash -> the answer.
    const engine = scriptedEngine(qwen3(), (call) => {
      const text = qwen3().tokenizer.decode(call.prompt_ids);
      if (text.includes("<tool_response>\nhi")) return { text: "Done: the command printed hi." };
      if (text.includes('"name":"CronList"')) return { text: qwen3ToolCall("Bash", { command: "echo hi", description: "print hi" }) };
      if (text.includes("</functions>")) return { text: qwen3ToolCall("CronList", {}) };
      return { text: qwen3ToolCall("ToolSearch", { query: "select:CronList", max_results: 5 }) };
    });
    proxy = await startProxy(engine);
    const session = proxy.createSession("claude");
    dir = mkdtempSync(join(tmpdir(), "lego-claude-"));
    const r = await claude(session, [], "Run echo hi", dir);
    expect(r.stdout, r.stderr).toBe("Done: the command printed hi.\n");
    expect(r.code).toBe(0);
    const prompts = engine.prompts.map((p) => qwen3().tokenizer.decode(p));
    // Deferred tools stay out of the prompt's tool list; the reference brings CronList's definition in.
    const toolList = /<tools>\n([^]*?)\n<\/tools>\n\nFor each function call/.exec(prompts[0]!)![1]!;
    expect(toolList).toContain('"name": "ToolSearch"');
    expect(toolList).not.toContain('"name": "CronList"');
    expect(prompts[1]).toMatch(/<tool_response>\n<functions>\n<function>\{"description": "[^]*", "name": "CronList", "parameters": \{[^]*\}<\/function>\n<\/functions>\n<\/tool_response>/);
    expect(prompts.at(-1)).toContain("<tool_response>\nhi");
    const records = proxy.closeSession(session.id);
    expect(records.segments.map((s) => [s.thread_id, s.seal_reason, s.turns.length])).toEqual([["main", "finished", 4]]);
    expect(records.side_thread_ids).toEqual([]);
    expect(records.counters).toEqual({ main_turns: 4, side_thread_turns: 0, tool_calls: 3, tool_call_parse_failures: 0, rolled_back_turns: 0 });
    expect(checkSegment(records.segments[0]!, new Map(records.turns.map((t) => [t.turn_id, t]))).retokenizedPolicyTokens).toBe(0);
  });

  it("Claude Code against an engine whose context window its prompt outgrows compacts, then stops on the 400s; never a 5xx to retry", async () => {
    // ~11.6k tokens of system prompt and tools fit a 16k window; `seq 1 3000`'s output does not.
    // Two small tool calls first, so there is history to compact.
    const engine = scriptedEngine(
      qwen3(),
      (call) => {
        const text = qwen3().tokenizer.decode(call.prompt_ids);
        if (text.includes("Respond with TEXT ONLY")) return { text: "<analysis>Counting.</analysis>\n<summary>The user asked to count to 3000.</summary>" };
        if (text.includes('"name":"CronList"')) return { text: qwen3ToolCall("Bash", { command: "seq 1 3000", description: "count" }) };
        if (text.includes("</functions>")) return { text: qwen3ToolCall("CronList", {}) };
        return { text: qwen3ToolCall("ToolSearch", { query: "select:CronList", max_results: 5 }) };
      },
      { contextWindow: 16_000 },
    );
    const statuses: number[] = [];
    proxy = await startProxy(engine, { onRequestEnd: (e) => (e.path === "/v1/messages" ? statuses.push(e.status) : undefined) });
    const session = proxy.createSession("claude");
    dir = mkdtempSync(join(tmpdir(), "lego-claude-"));
    const r = await claude(session, [], "Count to 3000", dir);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toContain("Prompt is too long");
    expect(statuses.filter((s) => s >= 500)).toEqual([]);
    expect(statuses.filter((s) => s === 400).length).toBeGreaterThanOrEqual(1);
    // It summarised its history (compaction) after a 400 ...
    const prompts = engine.prompts.map((p) => qwen3().tokenizer.decode(p));
    expect(prompts.some((p) => p.includes("Respond with TEXT ONLY"))).toBe(true);
    // ... and gave up after a few tries: against a 500 it was still retrying after 11 requests and 150 s.
    expect(statuses.length).toBeLessThanOrEqual(10);
    expect(statuses.at(-1)).toBe(400);
  });

  it("OpenCode runs bash through a tool call to a finish; its title call is a side thread", async () => {
    const engine = scriptedEngine(qwen3(), agentScript(qwen3ToolCall("bash", { command: "echo hi", description: "print hi" })));
    proxy = await startProxy(engine);
    const session = proxy.createSession("opencode");
    dir = mkdtempSync(join(tmpdir(), "lego-opencode-"));
    const config = join(dir, "opencode.json");
    writeFileSync(
      config,
      JSON.stringify({
        provider: { lego: { npm: "@ai-sdk/openai-compatible", name: "lego", options: { baseURL: `${session.baseUrl}/v1`, apiKey: session.secret }, models: { [MODEL_NAME]: { name: MODEL_NAME } } } },
        model: `lego/${MODEL_NAME}`,
        small_model: `lego/${MODEL_NAME}`,
        autoupdate: false,
        share: "disabled",
        permission: { bash: "allow", edit: "allow" },
      }),
    );
    const r = await run(
      OPENCODE,
      ["run", "-m", `lego/${MODEL_NAME}`, "Run echo hi"],
      { OPENCODE_CONFIG: config, OPENCODE_DISABLE_MODELS_FETCH: "1", OPENCODE_DISABLE_AUTOUPDATE: "1", HOME: dir, XDG_CONFIG_HOME: join(dir, ".config"), XDG_DATA_HOME: join(dir, ".data"), XDG_CACHE_HOME: join(dir, ".cache") },
      dir,
    );
    expect(r.stdout, r.stderr).toBe("Done: the command printed hi.\n");
    expect(r.code).toBe(0);
    const records = proxy.closeSession(session.id);
    expect(records.segments.map((s) => [s.thread, s.turns.length])).toEqual([
      ["main", 2],
      ["side", 1],
    ]);
    const turns = new Map(records.turns.map((t) => [t.turn_id, t]));
    for (const s of records.segments) expect(checkSegment(s, turns).retokenizedPolicyTokens).toBe(0);
  });
});
