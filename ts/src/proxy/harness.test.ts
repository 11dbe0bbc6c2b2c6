/**
 * The real harness binaries against the proxy, each driven by the scripted
 * engine through one tool call to a finish:
 * - Claude Code (npm @anthropic-ai/claude-code): `claude -p --bare`, ANTHROPIC_BASE_URL;
 * - OpenCode (npm opencode-ai): `opencode run`, an @ai-sdk/openai-compatible provider.
 * Each test skips, printing why, when its binary is not on PATH.
 */
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { ScriptedCall, ScriptedReply } from "../engine/scripted.ts";
import type { ProxyServer } from "./server.ts";
import { checkSegment, MODEL_NAME, qwen3, qwen3ToolCall, scriptedEngine, startProxy } from "./test-support.ts";

function available(bin: string): boolean {
  const ok = spawnSync(bin, ["--version"], { encoding: "utf8", timeout: 30_000 }).status === 0;
  if (!ok) console.warn(`skipping the ${bin} conformance test: '${bin}' is not on PATH (npm i -g @anthropic-ai/claude-code opencode-ai)`);
  return ok;
}

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
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.once("error", reject);
    child.once("exit", (code) => resolve({ code, stdout, stderr }));
  });
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
  it.runIf(available("claude"))("Claude Code runs Bash through a tool call to a finish", async () => {
    const engine = scriptedEngine(qwen3(), agentScript(qwen3ToolCall("Bash", { command: "echo hi", description: "print hi" })));
    proxy = await startProxy(engine);
    const session = proxy.createSession("claude");
    dir = mkdtempSync(join(tmpdir(), "lego-claude-"));
    const r = await run(
      "claude",
      ["-p", "--bare", "--tools", "Bash", "--dangerously-skip-permissions", "Run echo hi"],
      {
        ANTHROPIC_BASE_URL: session.baseUrl,
        ANTHROPIC_API_KEY: session.secret,
        ANTHROPIC_MODEL: MODEL_NAME,
        ANTHROPIC_SMALL_FAST_MODEL: MODEL_NAME,
        IS_SANDBOX: "1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
        HOME: dir,
      },
      dir,
    );
    expect(r.stdout, r.stderr).toBe("Done: the command printed hi.\n");
    expect(r.code).toBe(0);
    const records = proxy.closeSession(session.id);
    expect(records.segments.map((s) => [s.thread, s.turns.length])).toEqual([["main", 2]]);
    const turns = new Map(records.turns.map((t) => [t.turn_id, t]));
    expect(checkSegment(records.segments[0]!, turns).retokenizedPolicyTokens).toBe(0);
  });

  it.runIf(available("opencode"))("OpenCode runs bash through a tool call to a finish; its title call is a side thread", async () => {
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
      "opencode",
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
