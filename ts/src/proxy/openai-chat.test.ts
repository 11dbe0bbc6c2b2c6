/**
 * OpenAI Chat Completions conformance, driven by the official `openai` client
 * against the proxy + scripted engine, and one stream asserted byte for byte.
 */
import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import { afterEach, describe, expect, it } from "vitest";
import type { ScriptedReply } from "../engine/scripted.ts";
import { ProxyServer } from "./server.ts";
import { MODEL_NAME, qwen3, qwen3ToolCall, scriptedEngine, startProxy } from "./test-support.ts";

const tools: ChatCompletionTool[] = [
  { type: "function", function: { name: "read_file", description: "Read a file", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } } },
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
  const client = new OpenAI({ baseURL: `${session.baseUrl}/v1`, apiKey: session.secret, maxRetries: 0 });
  return { engine, session, client, proxy };
}

describe("OpenAI chat completions through the official client", () => {
  it("answers a plain question without streaming", async () => {
    const { client } = await setup([{ text: "Hello there." }]);
    const r = await client.chat.completions.create({ model: MODEL_NAME, messages: [{ role: "user", content: "Hi" }] });
    expect(r.choices[0]!.message).toEqual({ role: "assistant", content: "Hello there." });
    expect(r.choices[0]!.finish_reason).toBe("stop");
    expect(r.usage).toEqual({ prompt_tokens: 9, completion_tokens: 4, total_tokens: 13 });
  });

  it("runs a tool call to a finish over two turns, then streams the answer", async () => {
    const { client, session, proxy } = await setup([{ text: qwen3ToolCall("read_file", { path: "a.txt" }) }, { text: "The file says hi." }]);
    const messages: ChatCompletionMessageParam[] = [{ role: "user", content: "What is in a.txt?" }];
    const first = await client.chat.completions.create({ model: MODEL_NAME, messages, tools });
    const call = first.choices[0]!.message.tool_calls![0]!;
    expect(first.choices[0]!.finish_reason).toBe("tool_calls");
    expect(call.type === "function" && call.function).toEqual({ name: "read_file", arguments: '{"path":"a.txt"}' });
    messages.push(first.choices[0]!.message, { role: "tool", tool_call_id: call.id, content: "hi" });
    const stream = await client.chat.completions.create({ model: MODEL_NAME, messages, tools, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let usage: unknown = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe("The file says hi.");
    expect(usage).toMatchObject({ completion_tokens: 6 });
    const records = proxy.closeSession(session.id);
    expect(records.segments).toHaveLength(1);
    expect(records.segments[0]!.turns).toHaveLength(2);
  });

  it("returns a tool call whose string argument holds </tool_call> as a tool call, not as text", async () => {
    const path = "notes/</tool_call>.md";
    const { client } = await setup([{ text: qwen3ToolCall("read_file", { path }) }, { text: qwen3ToolCall("read_file", { path }) }]);
    for (const stream of [false, true]) {
      const r = stream
        ? await client.chat.completions.stream({ model: MODEL_NAME, messages: [{ role: "user", content: "read it" }], tools }).finalChatCompletion()
        : await client.chat.completions.create({ model: MODEL_NAME, messages: [{ role: "user", content: "read it" }], tools });
      expect(r.choices[0]!.finish_reason).toBe("tool_calls");
      expect(r.choices[0]!.message.tool_calls!.map((c) => c.type === "function" && c.function)).toEqual([{ name: "read_file", arguments: JSON.stringify({ path }) }]);
    }
  });

  it("streams parallel tool calls that the client accumulates", async () => {
    const { client } = await setup([{ text: `Reading both.\n${qwen3ToolCall("read_file", { path: "a" })}\n${qwen3ToolCall("read_file", { path: "b" })}` }]);
    const runner = client.chat.completions.stream({ model: MODEL_NAME, messages: [{ role: "user", content: "read a and b" }], tools });
    const done = await runner.finalChatCompletion();
    const msg = done.choices[0]!.message;
    expect(msg.content).toBe("Reading both.");
    expect(msg.tool_calls!.map((c) => c.type === "function" && [c.id, c.function.name, c.function.arguments])).toEqual([
      ["call_0_0", "read_file", '{"path":"a"}'],
      ["call_0_1", "read_file", '{"path":"b"}'],
    ]);
    expect(done.choices[0]!.finish_reason).toBe("tool_calls");
  });

  it("writes a stream with usage byte for byte", async () => {
    const { session } = await setup([{ text: qwen3ToolCall("read_file", { path: "x" }) }]);
    const res = await fetch(`${session.baseUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${session.secret}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL_NAME, messages: [{ role: "user", content: "x?" }], tools, stream: true, stream_options: { include_usage: true } }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
    const head = `"id":"chatcmpl-s1-0","object":"chat.completion.chunk","created":1700000000,"model":"${MODEL_NAME}"`;
    expect(await res.text()).toBe(
      `data: {${head},"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":null}\n\n` +
        `data: {${head},"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_0_0","type":"function","function":{"name":"read_file","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}\n\n` +
        `data: {${head},"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"path\\":\\"x\\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}\n\n` +
        `data: {${head},"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}\n\n` +
        `data: {${head},"choices":[],"usage":{"prompt_tokens":146,"completion_tokens":16,"total_tokens":162}}\n\n` +
        `data: [DONE]\n\n`,
    );
  });

  it("returns reasoning as reasoning_content and stops at max_tokens with finish_reason length", async () => {
    const { client } = await setup([{ text: "<think>\nhmm\n</think>\n\nDone." }, { text: "a b c d e f g h" }]);
    const r = await client.chat.completions.create({ model: MODEL_NAME, messages: [{ role: "user", content: "q" }] });
    expect(r.choices[0]!.message).toMatchObject({ content: "Done.", reasoning_content: "hmm" });
    const cut = await client.chat.completions.create({ model: MODEL_NAME, messages: [{ role: "user", content: "other" }], max_tokens: 3 });
    expect(cut.choices[0]!.finish_reason).toBe("length");
    expect(cut.usage!.completion_tokens).toBe(3);
  });

  it("parses the Qwen3-Coder XML tool-call form when the model is configured for it", async () => {
    const model = { ...qwen3(), toolCallFormat: "qwen3_coder_xml" as const };
    const engine = scriptedEngine(model, [{ text: "<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/a b.ts\n</parameter>\n</function>\n</tool_call>" }]);
    proxy = await ProxyServer.start({ model, engine, servedModels: [MODEL_NAME] });
    const s = proxy.createSession("x");
    const client = new OpenAI({ baseURL: `${s.baseUrl}/v1`, apiKey: s.secret, maxRetries: 0 });
    const r = await client.chat.completions.create({ model: MODEL_NAME, messages: [{ role: "user", content: "read it" }], tools });
    const call = r.choices[0]!.message.tool_calls![0]!;
    expect(call.type === "function" && call.function).toEqual({ name: "read_file", arguments: '{"path":"src/a b.ts"}' });
  });

  it("lists the served model", async () => {
    const { client } = await setup([]);
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual([MODEL_NAME]);
  });
});
