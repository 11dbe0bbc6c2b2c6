/**
 * Anthropic Messages conformance, driven by the official `@anthropic-ai/sdk`
 * client against the proxy + scripted engine, and one stream asserted byte for byte.
 */
import Anthropic from "@anthropic-ai/sdk";
import { afterEach, describe, expect, it } from "vitest";
import type { ScriptedReply } from "../engine/scripted.ts";
import type { ProxyServer } from "./server.ts";
import { MODEL_NAME, qwen3, qwen3ToolCall, scriptedEngine, startProxy } from "./test-support.ts";

const tools: Anthropic.Tool[] = [
  { name: "Bash", description: "Run a command", input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } },
];

let proxy: ProxyServer | null = null;
afterEach(async () => {
  await proxy?.close();
  proxy = null;
});

async function setup(script: ScriptedReply[]) {
  const engine = scriptedEngine(qwen3(), script);
  proxy = await startProxy(engine);
  const session = proxy.createSession("s1");
  const client = new Anthropic({ baseURL: session.baseUrl, apiKey: session.secret, maxRetries: 0 });
  return { engine, session, client, proxy };
}

describe("Anthropic messages through the official client", () => {
  it("answers without streaming, system blocks with cache_control accepted", async () => {
    const { client, engine, proxy: p } = await setup([{ text: "Hello." }]);
    const msg = await client.messages.create({
      model: MODEL_NAME,
      max_tokens: 100,
      system: [
        { type: "text", text: "You are terse." },
        { type: "text", text: "Be kind.", cache_control: { type: "ephemeral" } },
      ],
      messages: [{ role: "user", content: [{ type: "text", text: "Hi", cache_control: { type: "ephemeral" } }] }],
    });
    expect(msg).toMatchObject({ type: "message", role: "assistant", content: [{ type: "text", text: "Hello." }], stop_reason: "end_turn" });
    expect(qwen3().tokenizer.decode(engine.prompts[0]!)).toBe("<|im_start|>system\nYou are terse.\nBe kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    void p;
  });

  it("runs a tool call to a finish, streaming, with thinking, over ?beta=true", async () => {
    const { client, session, proxy } = await setup([
      { text: `<think>\nI will run ls.\n</think>\n\nRunning.\n${qwen3ToolCall("Bash", { command: "ls" })}` },
      { text: "There are two files." },
    ]);
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "List files" }];
    const first = await client.beta.messages.stream({ model: MODEL_NAME, max_tokens: 200, messages, tools, thinking: { type: "enabled", budget_tokens: 1024 } }).finalMessage();
    expect(first.stop_reason).toBe("tool_use");
    expect(first.content).toEqual([
      { type: "thinking", thinking: "I will run ls.", signature: "" },
      { type: "text", text: "Running." },
      { type: "tool_use", id: "toolu_0_0", name: "Bash", input: { command: "ls" } },
    ]);
    messages.push(
      { role: "assistant", content: first.content as Anthropic.ContentBlockParam[] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_0_0", content: "a\nb" }] },
    );
    const second = await client.messages.stream({ model: MODEL_NAME, max_tokens: 200, messages, tools }).finalMessage();
    expect(second.content).toEqual([{ type: "text", text: "There are two files." }]);
    const records = proxy.closeSession(session.id);
    expect(records.segments.map((s) => [s.thread, s.turns.length])).toEqual([["main", 2]]);
  });

  it("keeps a role:system message in the middle of the conversation in place", async () => {
    const { client, engine } = await setup([{ text: "ok" }]);
    await client.messages.create({
      model: MODEL_NAME,
      max_tokens: 10,
      messages: [
        { role: "user", content: "a" },
        { role: "assistant", content: "b" },
        { role: "system", content: "note" } as unknown as Anthropic.MessageParam,
        { role: "user", content: "c" },
      ],
    });
    expect(qwen3().tokenizer.decode(engine.prompts[0]!)).toContain("<|im_start|>system\nnote<|im_end|>\n<|im_start|>user\nc");
  });

  it("continues an assistant prefill instead of closing it, and the echo of prefill + reply extends the segment", async () => {
    const { client, engine, session, proxy } = await setup([{ text: ' 42, "b": 7}' }, { text: "You are welcome." }]);
    const messages: Anthropic.MessageParam[] = [
      { role: "user", content: "Answer in JSON." },
      { role: "assistant", content: '{"a":' },
    ];
    const first = await client.messages.create({ model: MODEL_NAME, max_tokens: 50, messages });
    // Only the continuation comes back, as from the API.
    expect(first.content).toEqual([{ type: "text", text: ' 42, "b": 7}' }]);
    expect(qwen3().tokenizer.decode(engine.prompts[0]!)).toBe('<|im_start|>user\nAnswer in JSON.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n{"a":');
    await client.messages.create({
      model: MODEL_NAME,
      max_tokens: 50,
      messages: [messages[0]!, { role: "assistant", content: '{"a": 42, "b": 7}' }, { role: "user", content: "Thanks." }],
    });
    const records = proxy.closeSession(session.id);
    expect(records.segments.map((s) => [s.seal_reason, s.turns.length])).toEqual([["finished", 2]]);
    expect(qwen3().tokenizer.decode(records.segments[0]!.token_ids)).toContain('{"a": 42, "b": 7}<|im_end|>\n<|im_start|>user\nThanks.');
  });

  it("refuses a prefill that ends in whitespace, as the API does", async () => {
    const { client } = await setup([]);
    const err = await client.messages.create({ model: MODEL_NAME, max_tokens: 5, messages: [{ role: "user", content: "x" }, { role: "assistant", content: "Sure, " }] }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
  });

  it("counts tokens", async () => {
    const { client } = await setup([]);
    const n = await client.messages.countTokens({ model: MODEL_NAME, messages: [{ role: "user", content: "Hi" }] });
    expect(n).toEqual({ input_tokens: 9 });
  });

  it("writes a stream byte for byte", async () => {
    const { session } = await setup([{ text: `Ok.\n${qwen3ToolCall("Bash", { command: "pwd" })}` }]);
    const res = await fetch(`${session.baseUrl}/v1/messages?beta=true`, {
      method: "POST",
      headers: { "x-api-key": session.secret, "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ model: MODEL_NAME, max_tokens: 50, stream: true, messages: [{ role: "user", content: "where?" }], tools }),
    });
    expect(res.status).toBe(200);
    const ev = (type: string, body: string) => `event: ${type}\ndata: {"type":"${type}"${body}}\n\n`;
    expect(await res.text()).toBe(
      ev("message_start", `,"message":{"id":"msg_s1_0","type":"message","role":"assistant","model":"${MODEL_NAME}","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":146,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}`) +
        ev("ping", "") +
        ev("content_block_start", `,"index":0,"content_block":{"type":"text","text":""}`) +
        ev("content_block_delta", `,"index":0,"delta":{"type":"text_delta","text":"Ok."}`) +
        ev("content_block_stop", `,"index":0`) +
        ev("content_block_start", `,"index":1,"content_block":{"type":"tool_use","id":"toolu_0_0","name":"Bash","input":{}}`) +
        ev("content_block_delta", `,"index":1,"delta":{"type":"input_json_delta","partial_json":"{\\"command\\":\\"pwd\\"}"}`) +
        ev("content_block_stop", `,"index":1`) +
        ev("message_delta", `,"delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":18}`) +
        ev("message_stop", ""),
    );
  });
});
