/**
 * What a session's records say about the policy's tool calls: the main
 * thread's committed calls, in call order, as the proxy parsed them — what the
 * harness layer reads to tell edits from reads (harness/file-touches.ts).
 */
import { afterEach, describe, expect, it } from "vitest";
import type { ProxyServer, ProxySession } from "../server.ts";
import { MODEL_NAME, qwen3, qwen3ToolCall, scriptedEngine, startProxy } from "../test-support.ts";

type Msg = Record<string, unknown>;
const tools = [{ type: "function", function: { name: "run", parameters: { type: "object", properties: { cmd: { type: "string" } } } } }];

let proxy: ProxyServer | null = null;
afterEach(async () => {
  await proxy?.close();
  proxy = null;
});

async function chat(s: ProxySession, messages: Msg[], withTools = true): Promise<Msg> {
  const res = await fetch(`${s.baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${s.secret}` },
    body: JSON.stringify({ model: MODEL_NAME, messages, ...(withTools ? { tools } : {}) }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { choices: Array<{ message: Msg }> }).choices[0]!.message;
}

describe("SessionRecords.main_tool_calls", () => {
  it("lists the main thread's committed calls in call order; a rolled-back turn's call, a side thread's call and a block that did not parse are not among them", async () => {
    proxy = await startProxy(scriptedEngine(qwen3(), [
      { text: qwen3ToolCall("run", { cmd: "first try" }) },
      { text: `${qwen3ToolCall("run", { cmd: "ls" })}\n${qwen3ToolCall("run", { cmd: "cat a.txt" })}` },
      { text: qwen3ToolCall("run", { cmd: "side" }) },
      { text: `${qwen3ToolCall("run", { cmd: "wc -l a.txt" })}\n<tool_call>\nnot json\n</tool_call>` },
      { text: "Done." },
    ]));
    const session = proxy.createSession("s");
    const h: Msg[] = [{ role: "system", content: "Agent." }, { role: "user", content: "What is in a.txt?" }];
    await chat(session, h);
    // The same request again: a retry, which rolls the first turn back.
    const second = await chat(session, h);
    const calls = second["tool_calls"] as Array<{ id: string; type: string; function: { name: string; arguments: string } }>;
    h.push({ role: "assistant", content: second["content"] ?? "", tool_calls: calls }, ...calls.map((c) => ({ role: "tool", tool_call_id: c.id, content: "ok" })));
    await chat(session, [{ role: "system", content: "Generate a title." }, { role: "user", content: "u1" }], false);
    const third = await chat(session, h);
    const more = third["tool_calls"] as typeof calls;
    h.push({ role: "assistant", content: third["content"] ?? "", tool_calls: more }, ...more.map((c) => ({ role: "tool", tool_call_id: c.id, content: "1" })));
    await chat(session, h);
    const records = proxy.closeSession(session.id);
    expect(records.main_tool_calls.map((c) => [c.name, JSON.parse(c.arguments)])).toEqual([
      ["run", { cmd: "ls" }],
      ["run", { cmd: "cat a.txt" }],
      ["run", { cmd: "wc -l a.txt" }],
    ]);
    expect(records.counters).toMatchObject({ main_turns: 3, side_thread_turns: 1, tool_calls: 3, tool_call_parse_failures: 1, rolled_back_turns: 1 });
  });
});
