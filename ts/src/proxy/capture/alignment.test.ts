/**
 * Token alignment across multi-turn sessions whose clients re-serialize what
 * they echo back. For every scenario: each turn's prompt is exactly what the
 * engine received, segments are prompt + completion token-exactly, and the
 * count of re-tokenized policy tokens is 0.
 */
import { afterEach, describe, expect, it } from "vitest";
import type { ScriptedEngine, ScriptedReply } from "../../engine/scripted.ts";
import type { EngineClient } from "../../engine/types.ts";
import { TokenProvenance, type Turn } from "../records.ts";
import type { ProxyServer, ProxySession } from "../server.ts";
import { checkSegment, MODEL_NAME, qwen3, qwen3ToolCall, scriptedEngine, startProxy } from "../test-support.ts";
import type { SessionRecords } from "./session-capture.ts";
import type { RoutingShape } from "../../schema/index.ts";

type Msg = Record<string, unknown>;
const tools = [{ type: "function", function: { name: "run", parameters: { type: "object", properties: { cmd: { type: "string" }, cwd: { type: "string" } } } } }];
const anthropicTools = [{ name: "Bash", input_schema: { type: "object", properties: { command: { type: "string" }, timeout: { type: "number" } } } }];

let proxy: ProxyServer | null = null;
afterEach(async () => {
  await proxy?.close();
  proxy = null;
});

async function setup(script: ScriptedReply[], moe?: { layers: number; topK: number; experts: number; inputRows?: boolean }, decodeMsPerToken = 0) {
  const engine = scriptedEngine(qwen3(), script, { ...(moe ? { moe } : {}), decodeMsPerToken });
  proxy = await startProxy(engine);
  return { engine, session: proxy.createSession("s"), proxy };
}

async function chat(s: ProxySession, messages: Msg[], extra: Msg = {}): Promise<Msg> {
  const res = await fetch(`${s.baseUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${s.secret}` },
    body: JSON.stringify({ model: MODEL_NAME, messages, tools, ...extra }),
  });
  const body = (await res.json()) as { choices: Array<{ message: Msg }> };
  expect(res.status).toBe(200);
  return body.choices[0]!.message;
}

async function anthropic(s: ProxySession, messages: Msg[], system = "You are Claude Code.", tools: Msg[] = anthropicTools): Promise<Msg> {
  const res = await fetch(`${s.baseUrl}/v1/messages?beta=true`, {
    method: "POST",
    headers: { "x-api-key": s.secret },
    body: JSON.stringify({ model: MODEL_NAME, max_tokens: 256, system: [{ type: "text", text: system }], messages, tools }),
  });
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as Msg;
}

/** The contract every scenario must meet; returns the records for scenario-specific checks. */
function expectAligned(records: SessionRecords, engine: ScriptedEngine, routing: RoutingShape | null = null): SessionRecords {
  const all: Turn[] = [...records.turns, ...records.audit.map((a) => a.turn)];
  const byId = new Map(all.map((t) => [t.turn_id, t]));
  // Every turn's prompt is what the engine was sent, call for call.
  const sent = all.map((t) => Number(t.turn_id.split("turn-")[1]));
  for (const [i, t] of all.entries()) expect(Array.from(t.prompt_ids)).toEqual(Array.from(engine.prompts[sent[i]!]!));
  let retokenized = 0;
  for (const seg of records.segments) retokenized += checkSegment(seg, byId, routing).retokenizedPolicyTokens;
  expect(retokenized).toBe(0);
  return records;
}

/** Re-serializes like Claude Code: different key order and spacing. */
function reserialize(args: string): string {
  const v = JSON.parse(args) as Record<string, unknown>;
  return JSON.stringify(Object.fromEntries(Object.entries(v).reverse()), null, 1);
}

describe("segments stay token-exact when clients re-serialize history", () => {
  it("merges a three-turn tool session into one segment despite re-serialized arguments and whitespace", async () => {
    const { engine, session, proxy } = await setup([
      { text: `Checking.\n${qwen3ToolCall("run", { cmd: "ls", cwd: "/w" })}` },
      { text: qwen3ToolCall("run", { cmd: "cat a.txt", cwd: "/w" }) },
      { text: "The answer is 42." },
    ]);
    const messages: Msg[] = [{ role: "system", content: "Agent." }, { role: "user", content: "What is in /w?" }];
    for (let turn = 0; turn < 3; turn++) {
      const reply = await chat(session, messages);
      const calls = (reply["tool_calls"] as Array<{ id: string; function: { name: string; arguments: string } }> | undefined) ?? [];
      // The client pads content with whitespace and re-serializes the arguments.
      messages.push({ role: "assistant", content: `  ${reply["content"] ?? ""}\n`, tool_calls: calls.map((c) => ({ ...c, type: "function", function: { ...c.function, arguments: reserialize(c.function.arguments) } })) });
      for (const c of calls) messages.push({ role: "tool", tool_call_id: c.id, content: `output of ${c.function.arguments}` });
      if (calls.length === 0) break;
    }
    const records = expectAligned(proxy.closeSession(session.id), engine);
    expect(records.segments.map((s) => [s.thread, s.seal_reason, s.turns.length])).toEqual([["main", "finished", 3]]);
    expect(records.audit).toEqual([]);
    expect(records.counters).toMatchObject({ main_turns: 3, tool_calls: 2 });
  });

  it("counts the tool-call blocks that do not parse (they reach the harness as text)", async () => {
    const { engine, session, proxy } = await setup([
      { text: "Trying.\n<tool_call>\nnot json\n</tool_call>" },
      { text: qwen3ToolCall("run", { cmd: "ls", cwd: "/w" }) },
    ]);
    const messages: Msg[] = [{ role: "system", content: "Agent." }, { role: "user", content: "What is in /w?" }];
    const first = await chat(session, messages);
    expect(first["content"]).toContain("not json");
    messages.push({ role: "assistant", content: first["content"] }, { role: "user", content: "Use the tool." });
    await chat(session, messages);
    const records = expectAligned(proxy.closeSession(session.id), engine);
    expect(records.counters).toMatchObject({ main_turns: 2, tool_calls: 1, tool_call_parse_failures: 1 });
  });

  it("keeps a reply whose token split is not the tokenizer's own: the next prompt carries the engine's ids, not a re-tokenization", async () => {
    const model = qwen3();
    const text = `Looking first.\n${qwen3ToolCall("run", { cmd: "cat README.md", cwd: "/w" })}`;
    // The same text, one token per character: what a sampling policy may emit, and what
    // re-tokenizing the echoed text would merge back into far fewer tokens.
    const split = [...text].flatMap((ch) => model.tokenizer.encode(ch));
    expect(model.tokenizer.decode(split)).toBe(text);
    expect(split.length).toBeGreaterThan(model.tokenizer.encode(text).length);
    const { engine, session, proxy } = await setup([{ token_ids: [...split, model.codec.endOfTurnId] }, { text: "It says hello." }]);
    const messages: Msg[] = [{ role: "system", content: "Agent." }, { role: "user", content: "Read the README." }];
    const first = await chat(session, messages);
    const calls = first["tool_calls"] as Array<{ id: string; function: { name: string; arguments: string } }>;
    expect(calls.map((c) => JSON.parse(c.function.arguments))).toEqual([{ cmd: "cat README.md", cwd: "/w" }]);
    messages.push({ role: "assistant", content: first["content"], tool_calls: calls.map((c) => ({ ...c, type: "function", function: { ...c.function, arguments: reserialize(c.function.arguments) } })) });
    messages.push({ role: "tool", tool_call_id: calls[0]!.id, content: "hello" });
    await chat(session, messages);
    // The second prompt extends the first prompt plus the engine's own ids, split as sampled.
    const [p0, p1] = [Array.from(engine.prompts[0]!), Array.from(engine.prompts[1]!)];
    expect(p1.slice(0, p0.length + split.length)).toEqual([...p0, ...split]);
    const records = expectAligned(proxy.closeSession(session.id), engine);
    expect(records.segments.map((seg) => [seg.thread, seg.turns.length])).toEqual([["main", 2]]);
    const seg = records.segments[0]!;
    const span = seg.turns[0]!;
    expect(Array.from(seg.token_ids.slice(span.completion_start, span.completion_start + split.length))).toEqual(split);
  });

  it("matches assistant turns by tool-call id when the harness renames the tool (Claude Code)", async () => {
    const { engine, session, proxy } = await setup([{ text: qwen3ToolCall("Bash", { command: "ls", timeout: 5 }) }, { text: "done" }]);
    const first = await anthropic(session, [{ role: "user", content: "ls please" }]);
    const use = (first["content"] as Msg[]).find((b) => b["type"] === "tool_use")!;
    await anthropic(session, [
      { role: "user", content: "ls please" },
      { role: "assistant", content: [{ type: "text", text: "" }, { ...use, name: "mcp__shell__Bash", input: { timeout: 5.0, command: "ls" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: use["id"], content: [{ type: "text", text: "a b" }] }] },
    ]);
    const records = expectAligned(proxy.closeSession(session.id), engine);
    expect(records.segments.map((s) => s.turns.length)).toEqual([2]);
  });

  it("marks the newline the template writes after <|im_end|> as template, and only sampled tokens as trainable", async () => {
    const { engine, session, proxy } = await setup([{ text: "one" }, { text: "two" }]);
    await chat(session, [{ role: "user", content: "a" }]);
    await chat(session, [{ role: "user", content: "a" }, { role: "assistant", content: "one" }, { role: "user", content: "b" }]);
    const [seg] = expectAligned(proxy.closeSession(session.id), engine).segments;
    const end = seg!.turns[0]!.completion_end;
    const { tokenizer, endOfTurnId } = { tokenizer: qwen3().tokenizer, endOfTurnId: qwen3().codec.endOfTurnId };
    expect(seg!.token_ids[end - 1]).toBe(endOfTurnId);
    expect(tokenizer.decode([seg!.token_ids[end]!])).toBe("\n");
    expect(seg!.provenance[end]).toBe(TokenProvenance.template);
    // The generation prompt before each completion is template too; the harness's text is prompt.
    for (const span of seg!.turns) {
      const start = span.completion_start;
      expect(tokenizer.decode(seg!.token_ids.subarray(start - 3, start))).toBe("<|im_start|>assistant\n");
      expect(Array.from(seg!.provenance.subarray(start - 4, start))).toEqual([TokenProvenance.prompt, TokenProvenance.template, TokenProvenance.template, TokenProvenance.template]);
    }
    expect(Array.from(seg!.loss_mask).reduce((a, b) => a + b, 0)).toBe(seg!.turns.reduce((n, t) => n + t.completion_end - t.completion_start, 0));
  });

  it("closes a turn cut by max_tokens with template tokens so the next prompt still extends it", async () => {
    const { engine, session, proxy } = await setup([{ text: "a long answer that is cut" }, { text: "ok" }]);
    const cut = await chat(session, [{ role: "user", content: "q" }], { max_tokens: 2 });
    await chat(session, [{ role: "user", content: "q" }, { role: "assistant", content: cut["content"] }, { role: "user", content: "go on" }]);
    const [seg] = expectAligned(proxy.closeSession(session.id), engine).segments;
    expect(seg!.turns.map((t) => t.finish_reason)).toEqual(["length", "stop"]);
    const end = seg!.turns[0]!.completion_end;
    expect(qwen3().tokenizer.decode(seg!.token_ids.subarray(end, end + 2))).toBe("<|im_end|>\n");
    expect(Array.from(seg!.provenance.subarray(end, end + 2))).toEqual([TokenProvenance.template, TokenProvenance.template]);
  });

  it("seals the segment when the harness compacts its history", async () => {
    const { engine, session, proxy } = await setup([{ text: "r1" }, { text: "r2" }, { text: "r3" }]);
    const sys = { role: "system", content: "Agent." };
    await chat(session, [sys, { role: "user", content: "u1" }]);
    await chat(session, [sys, { role: "user", content: "u1" }, { role: "assistant", content: "r1" }, { role: "user", content: "u2" }]);
    await chat(session, [sys, { role: "user", content: "Summary: u1 r1 u2 r2" }, { role: "user", content: "u3" }]);
    const records = expectAligned(proxy.closeSession(session.id), engine);
    expect(records.segments.map((s) => [s.seal_reason, s.turns.length])).toEqual([
      ["history_rewritten", 2],
      ["finished", 1],
    ]);
  });

  it("seals when a system reminder is injected into an old message, but not when appended to the new one", async () => {
    const { engine, session, proxy } = await setup([{ text: "r1" }, { text: "r2" }, { text: "r3" }]);
    await chat(session, [{ role: "user", content: "u1" }]);
    const reminder = "<system-reminder>Todo list is empty.</system-reminder>";
    await chat(session, [{ role: "user", content: "u1" }, { role: "assistant", content: "r1" }, { role: "user", content: `u2\n${reminder}` }]);
    await chat(session, [{ role: "user", content: `${reminder}\nu1` }, { role: "assistant", content: "r1" }, { role: "user", content: `u2\n${reminder}` }, { role: "assistant", content: "r2" }, { role: "user", content: "u3" }]);
    const records = expectAligned(proxy.closeSession(session.id), engine);
    expect(records.segments.map((s) => [s.seal_reason, s.turns.length])).toEqual([
      ["history_rewritten", 2],
      ["finished", 1],
    ]);
  });

  it("seals when an earlier user message changes only in whitespace: the engine would otherwise keep the old tokens", async () => {
    const { engine, session, proxy } = await setup([{ text: "r1" }, { text: "r2" }, { text: "r3" }]);
    await chat(session, [{ role: "user", content: "def f():\n  return 1" }]);
    await chat(session, [{ role: "user", content: "def f():\n  return 1" }, { role: "assistant", content: "r1" }, { role: "user", content: "u2" }]);
    // The harness re-indents the code it sent first.
    await chat(session, [{ role: "user", content: "def f():\n    return 1" }, { role: "assistant", content: "r1" }, { role: "user", content: "u2" }, { role: "assistant", content: "r2" }, { role: "user", content: "u3" }]);
    const records = expectAligned(proxy.closeSession(session.id), engine);
    expect(records.segments.map((s) => [s.seal_reason, s.turns.length])).toEqual([
      ["history_rewritten", 2],
      ["finished", 1],
    ]);
    expect(qwen3().tokenizer.decode(records.segments[1]!.token_ids)).toContain("def f():\n    return 1");
  });

  it("rolls a retried turn back into the audit list", async () => {
    const { engine, session, proxy } = await setup([{ text: "r1" }, { text: "first try" }, { text: "second try" }, { text: "r3" }]);
    const h = [{ role: "user", content: "u1" }, { role: "assistant", content: "r1" }, { role: "user", content: "u2" }];
    await chat(session, h.slice(0, 1));
    await chat(session, h);
    await chat(session, h);
    await chat(session, [...h, { role: "assistant", content: "second try" }, { role: "user", content: "u3" }]);
    const records = expectAligned(proxy.closeSession(session.id), engine);
    expect(records.segments.map((s) => [s.seal_reason, s.turns.length])).toEqual([["finished", 3]]);
    expect(records.audit.map((a) => [a.reason, a.turn.turn_id])).toEqual([["rolled_back", "s/turn-1"]]);
    expect(records.counters).toEqual({ main_turns: 3, side_thread_turns: 0, tool_calls: 0, tool_call_parse_failures: 0, rolled_back_turns: 1 });
    expect(qwen3().tokenizer.decode(records.segments[0]!.token_ids)).toContain("second try");
    expect(qwen3().tokenizer.decode(records.segments[0]!.token_ids)).not.toContain("first try");
  });

  it("keeps every prompt exact when two calls of one thread are in flight at once, whichever finishes first", async () => {
    // The second call planned (fast reply) commits first; the first one (slow reply) was
    // planned on the same history and gets a segment of its own whose prompt never trains.
    const slow = "a much longer reply that takes the engine a while to sample";
    const { engine, session, proxy } = await setup([{ text: "r1" }, { text: slow }, { text: "r2" }, { text: "r3" }], undefined, 2);
    const h = [{ role: "user", content: "u1" }, { role: "assistant", content: "r1" }];
    await chat(session, h.slice(0, 1));
    const [late, early] = await Promise.all([chat(session, [...h, { role: "user", content: "u2 (first)" }]), chat(session, [...h, { role: "user", content: "u2 (second)" }])]);
    expect([late["content"], early["content"]]).toEqual([slow, "r2"]);
    await chat(session, [...h, { role: "user", content: "u2 (second)" }, { role: "assistant", content: "r2" }, { role: "user", content: "u3" }]);
    const records = expectAligned(proxy.closeSession(session.id), engine);
    // The stale call's segment was sealed when it committed, before the session closed.
    expect(records.segments.map((s) => [s.seal_reason, s.turns.map((t) => t.turn_id)])).toEqual([
      ["finished", ["s/turn-1"]],
      ["finished", ["s/turn-0", "s/turn-2", "s/turn-3"]],
    ]);
    const own = records.segments[0]!;
    expect(Array.from(own.provenance.subarray(0, own.turns[0]!.completion_start)).every((p) => p === TokenProvenance.prompt)).toBe(true);
  });

  it("records a call with another system prompt and no tools as a flagged side thread", async () => {
    const { engine, session, proxy } = await setup([{ text: "r1" }, { text: "Title: listing" }, { text: "r2" }]);
    await chat(session, [{ role: "system", content: "Agent." }, { role: "user", content: "u1" }]);
    await chat(session, [{ role: "system", content: "Generate a title." }, { role: "user", content: "u1" }], { tools: undefined });
    await chat(session, [{ role: "system", content: "Agent." }, { role: "user", content: "u1" }, { role: "assistant", content: "r1" }, { role: "user", content: "u2" }]);
    const records = expectAligned(proxy.closeSession(session.id), engine);
    expect(records.segments.map((s) => [s.thread, s.thread_id, s.turns.length])).toEqual([
      ["main", "main", 2],
      ["side", "side-1", 1],
    ]);
    expect(records.side_thread_ids).toEqual(["side-1"]);
    expect(records.turns.map((t) => t.thread_id)).toEqual(["main", "side-1", "main"]);
    expect(records.counters).toMatchObject({ main_turns: 2, side_thread_turns: 1 });
  });

  it("keeps a call that changes the tool list in its thread, sealing the segment because the prompt changed", async () => {
    const { engine, session, proxy } = await setup([{ text: "r1" }, { text: "r2" }, { text: "r3" }]);
    const more = [...tools, { type: "function", function: { name: "search", parameters: { type: "object", properties: { q: { type: "string" } } } } }];
    const h: Msg[] = [{ role: "system", content: "Agent." }, { role: "user", content: "u1" }];
    await chat(session, h);
    h.push({ role: "assistant", content: "r1" }, { role: "user", content: "u2" });
    await chat(session, h, { tools: more });
    h.push({ role: "assistant", content: "r2" }, { role: "user", content: "u3" });
    await chat(session, h, { tools: more });
    const records = expectAligned(proxy.closeSession(session.id), engine);
    expect(records.segments.map((s) => [s.thread_id, s.seal_reason, s.turns.length])).toEqual([
      ["main", "history_rewritten", 1],
      ["main", "finished", 2],
    ]);
    expect(records.side_thread_ids).toEqual([]);
    expect(records.counters).toMatchObject({ main_turns: 3, side_thread_turns: 0 });
  });

  it("renders a tool_reference as the API expands it, and declaring the deferred tool does not seal (Claude Code's ToolSearch)", async () => {
    const search = qwen3ToolCall("ToolSearch", { query: "select:WebFetch", max_results: 5 });
    const fetchCall = qwen3ToolCall("WebFetch", { url: "https://example.com" });
    const { engine, session, proxy } = await setup([{ text: search }, { text: fetchCall }, { text: "It is an example page." }]);
    const toolSearch = { name: "ToolSearch", description: "Fetches deferred tools.", input_schema: { type: "object", properties: { query: { type: "string" }, max_results: { type: "number" } } } };
    const placeholder = { name: "DeferredToolPlaceholder", description: "never call this", input_schema: { type: "object", properties: {} }, defer_loading: true };
    const webFetch = { name: "WebFetch", description: "Fetch a URL", input_schema: { type: "object", properties: { url: { type: "string" } } }, defer_loading: true };
    const h: Msg[] = [{ role: "user", content: "What is on example.com?" }];
    const first = await anthropic(session, h, "You are Claude Code.", [...anthropicTools, toolSearch, placeholder]);
    const use = (first["content"] as Msg[]).find((b) => b["type"] === "tool_use")!;
    h.push({ role: "assistant", content: first["content"] }, { role: "user", content: [{ type: "tool_result", tool_use_id: use["id"], content: [{ type: "tool_reference", tool_name: "WebFetch" }] }] });
    const second = await anthropic(session, h, "You are Claude Code.", [...anthropicTools, toolSearch, webFetch, placeholder]);
    expect(second["content"]).toEqual([{ type: "tool_use", id: "toolu_1_0", name: "WebFetch", input: { url: "https://example.com" } }]);
    const prompt = qwen3().tokenizer.decode(engine.prompts[1]!);
    expect(prompt).toContain(
      '<tool_response>\n<functions>\n<function>{"description": "Fetch a URL", "name": "WebFetch", "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}}</function>\n</functions>\n</tool_response>',
    );
    // Deferred tools are not in the prompt's tool list.
    expect(prompt.slice(0, prompt.indexOf("</tools>"))).not.toContain("WebFetch");
    expect(prompt.slice(0, prompt.indexOf("</tools>"))).not.toContain("DeferredToolPlaceholder");
    h.push({ role: "assistant", content: second["content"] }, { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1_0", content: "Example Domain" }] });
    await anthropic(session, h, "You are Claude Code.", [...anthropicTools, toolSearch, webFetch, placeholder]);
    const records = expectAligned(proxy.closeSession(session.id), engine);
    expect(records.segments.map((s) => [s.thread_id, s.seal_reason, s.turns.length])).toEqual([["main", "finished", 3]]);
  });

  it("refuses a tool_reference to a tool the request does not declare", async () => {
    const { session } = await setup([]);
    const res = await fetch(`${session.baseUrl}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": session.secret },
      body: JSON.stringify({
        model: MODEL_NAME,
        max_tokens: 16,
        tools: anthropicTools,
        messages: [
          { role: "user", content: "x" },
          { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "Bash", input: {} }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: [{ type: "tool_reference", tool_name: "Nope" }] }] },
        ],
      }),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      type: "error",
      error: { type: "invalid_request_error", message: 'messages.2.content.0.content.0.tool_name: the request declares no tool "Nope"' },
    });
  });

  it("records MoE routing for sampled tokens and pads the rest", async () => {
    const moe = { layers: 2, topK: 2, experts: 8 };
    const { engine, session, proxy } = await setup([{ text: "r1" }, { text: "r2" }], moe);
    await chat(session, [{ role: "user", content: "u1" }]);
    await chat(session, [{ role: "user", content: "u1" }, { role: "assistant", content: "r1" }, { role: "user", content: "u2" }]);
    const records = expectAligned(proxy.closeSession(session.id), engine, { layers: 2, top_k: 2, num_experts: 8 });
    const seg = records.segments[0]!;
    expect(seg.routing).toBeInstanceOf(Uint8Array);
    expect(seg.routing!.length).toBe(seg.token_ids.length * 4);
    expect(Array.from(seg.routing_recorded!)).toEqual(Array.from(seg.provenance, (p) => (p === TokenProvenance.sampled ? 1 : 0)));
    const span = seg.turns[1]!;
    const turn = records.turns[1]!;
    expect(Array.from(seg.routing!.subarray(span.completion_start * 4, span.completion_end * 4))).toEqual(Array.from(turn.routing!));
  });
});

describe("routing coverage", () => {
  const moe = { layers: 2, topK: 2, experts: 8, inputRows: true };
  const shape = { layers: 2, top_k: 2, num_experts: 8 };
  const width = 4;

  async function threeTurns(engine: EngineClient) {
    proxy = await startProxy(engine);
    const session = proxy.createSession("s");
    const h: Msg[] = [{ role: "user", content: "u1" }];
    for (const reply of ["r1", "r2", "r3"]) {
      await chat(session, h);
      h.push({ role: "assistant", content: reply }, { role: "user", content: `after ${reply}` });
    }
    return proxy.closeSession(session.id);
  }

  it("fills each turn's last sampled token from the next turn's prefill: every row the trainer replays is recorded", async () => {
    const engine = scriptedEngine(qwen3(), [{ text: "r1" }, { text: "r2" }, { text: "r3" }], { moe });
    const records = expectAligned(await threeTurns(engine), engine, shape);
    const [seg] = records.segments;
    // Engines route only tokens fed as input: each turn's last token came back without a row ...
    for (const t of records.turns) expect(t.routing!.subarray((t.completion_ids.length - 1) * width).every((v) => v === 0)).toBe(true);
    // ... and the next prefill routed it; only the segment's very last token has none.
    expect(Array.from(seg!.routing_recorded!)).toEqual([...Array<number>(seg!.token_ids.length - 1).fill(1), 0]);
    expect(records.routing_coverage).toEqual([{ segment_id: seg!.segment_id, thread_id: "main", rows_needed: seg!.token_ids.length - 1, rows_recorded: seg!.token_ids.length - 1, coverage: 1 }]);
    const next = records.turns[1]!;
    const p = seg!.turns[0]!.completion_end - 1;
    expect(Array.from(seg!.routing!.subarray(p * width, (p + 1) * width))).toEqual(Array.from(next.prompt_routing!.subarray(p * width, (p + 1) * width)));
  });

  it("leaves a sampled token's row unrecorded when the next prefill ran under another policy version", async () => {
    const scripted = scriptedEngine(qwen3(), [{ text: "r1" }, { text: "r2" }, { text: "r3" }], { moe });
    let call = 0;
    // The weights change after the first call.
    const updated: EngineClient = {
      name: "updated",
      async *generate(req, signal) {
        const version = call++ === 0 ? 0 : 1;
        for await (const c of scripted.generate(req, signal)) yield { ...c, policy_version: version };
      },
      close: async () => {},
    };
    const records = await threeTurns(updated);
    const [seg] = records.segments;
    const unrecorded = Array.from(seg!.routing_recorded!.subarray(0, seg!.token_ids.length - 1)).flatMap((r, i) => (r === 0 ? [i] : []));
    expect(unrecorded).toEqual([seg!.turns[0]!.completion_end - 1]);
    expect(records.routing_coverage[0]!.rows_recorded).toBe(seg!.token_ids.length - 2);
  });
});
