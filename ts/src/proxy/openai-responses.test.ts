/**
 * OpenAI Responses API (Codex CLI's protocol) through the official `openai`
 * client, and one stream asserted byte for byte.
 */
import OpenAI from "openai";
import type { FunctionTool, ResponseInputItem } from "openai/resources/responses/responses";
import { afterEach, describe, expect, it } from "vitest";
import type { ScriptedReply } from "../engine/scripted.ts";
import { EngineError, type EngineClient } from "../engine/types.ts";
import type { ProxyServer } from "./server.ts";
import { checkSegment, MODEL_NAME, qwen3, qwen3ToolCall, scriptedEngine, startProxy } from "./test-support.ts";

const tools: FunctionTool[] = [{ type: "function", name: "shell", description: "Run", strict: false, parameters: { type: "object", properties: { command: { type: "array", items: { type: "string" } } } } }];

let proxy: ProxyServer | null = null;
afterEach(async () => {
  await proxy?.close();
  proxy = null;
});

async function setup(script: ScriptedReply[]) {
  proxy = await startProxy(scriptedEngine(qwen3(), script));
  const session = proxy.createSession("r");
  return { session, proxy, client: new OpenAI({ baseURL: `${session.baseUrl}/v1`, apiKey: session.secret, maxRetries: 0 }) };
}

describe("OpenAI Responses through the official client", () => {
  it("runs a function call to a finish: non-streaming, then streaming", async () => {
    const { client, session, proxy } = await setup([{ text: qwen3ToolCall("shell", { command: ["ls"] }) }, { text: "Two files." }]);
    const input: ResponseInputItem[] = [{ role: "user", content: "list files" }];
    const first = await client.responses.create({ model: MODEL_NAME, instructions: "You are Codex.", input, tools, store: false });
    expect(first.status).toBe("completed");
    expect(first.output).toEqual([{ type: "function_call", id: "fc_resp_r_0_0", call_id: "call_0_0", name: "shell", arguments: '{"command":["ls"]}', status: "completed" }]);
    input.push(first.output[0] as ResponseInputItem, { type: "function_call_output", call_id: "call_0_0", output: "a\nb" });
    const second = await client.responses.stream({ model: MODEL_NAME, instructions: "You are Codex.", input, tools, store: false }).finalResponse();
    expect(second.output_text).toBe("Two files.");
    const records = proxy.closeSession(session.id);
    expect(records.segments.map((s) => s.turns.length)).toEqual([2]);
    expect(checkSegment(records.segments[0]!, new Map(records.turns.map((t) => [t.turn_id, t]))).retokenizedPolicyTokens).toBe(0);
  });

  it("reads a reply's reasoning and message items, echoed back as returned, as one assistant turn", async () => {
    const { client, session, proxy } = await setup([{ text: "<think>\nThe user greets me.\n</think>\n\nHello!" }, { text: "Fine, thanks." }]);
    const input: ResponseInputItem[] = [{ role: "user", content: "hi" }];
    const first = await client.responses.create({ model: MODEL_NAME, instructions: "You are Codex.", input, store: false });
    expect(first.output.map((o) => o.type)).toEqual(["reasoning", "message"]);
    input.push(...(first.output as ResponseInputItem[]), { role: "user", content: "how are you?" });
    const second = await client.responses.create({ model: MODEL_NAME, instructions: "You are Codex.", input, store: false });
    expect(second.output_text).toBe("Fine, thanks.");
    const records = proxy.closeSession(session.id);
    expect(records.segments.map((s) => [s.seal_reason, s.turns.length])).toEqual([["finished", 2]]);
  });

  it("sends a failure after the first event as a Responses `error` event, then response.failed", async () => {
    // One token (streamed as a text delta, events 2-4), then the engine fails.
    const failing: EngineClient = {
      name: "failing",
      async *generate() {
        yield { token_ids: [13048], logprobs: [-0.5], routing: null, policy_version: 0, finish_reason: null };
        throw new EngineError("failing", "lost the GPU");
      },
      close: async () => {},
    };
    proxy = await startProxy(failing);
    const session = proxy.createSession("r");
    const res = await fetch(`${session.baseUrl}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${session.secret}` },
      body: JSON.stringify({ model: MODEL_NAME, input: "hello", stream: true }),
    });
    expect(res.status).toBe(200);
    const message = "engine failed on turn r/turn-0 of session r: failing engine: lost the GPU";
    const text = await res.text();
    const tail = text.slice(text.indexOf("event: error"));
    expect(tail).toBe(
      `event: error\ndata: {"type":"error","sequence_number":5,"code":"server_error","message":"${message}","param":null}\n\n` +
        `event: response.failed\ndata: {"type":"response.failed","sequence_number":6,"response":{"id":"resp_r_0","object":"response","created_at":1700000000,"status":"failed",` +
        `"error":{"code":"server_error","message":"${message}"},"incomplete_details":null,"model":"${MODEL_NAME}","output":[],"parallel_tool_calls":true,"usage":null}}\n\n`,
    );
    // The official client surfaces it as an error, not as a completed response.
    const client = new OpenAI({ baseURL: `${session.baseUrl}/v1`, apiKey: session.secret, maxRetries: 0 });
    await expect(client.responses.stream({ model: MODEL_NAME, input: "hello" }).finalResponse()).rejects.toThrow(/lost the GPU/);
  });

  it("refuses previous_response_id: the proxy is stateless", async () => {
    const { client } = await setup([]);
    await expect(client.responses.create({ model: MODEL_NAME, input: "x", previous_response_id: "resp_1" })).rejects.toBeInstanceOf(OpenAI.BadRequestError);
  });

  it("writes a stream byte for byte", async () => {
    const { session } = await setup([{ text: "Hi." }]);
    const res = await fetch(`${session.baseUrl}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${session.secret}` },
      body: JSON.stringify({ model: MODEL_NAME, input: "hello", stream: true }),
    });
    const resp = (status: string, output: string, usage: string) =>
      `{"id":"resp_r_0","object":"response","created_at":1700000000,"status":"${status}","error":null,"incomplete_details":null,"model":"${MODEL_NAME}","output":[${output}],"parallel_tool_calls":true,"usage":${usage}}`;
    const ev = (type: string, seq: number, body: string) => `event: ${type}\ndata: {"type":"${type}","sequence_number":${seq}${body}}\n\n`;
    const at = `"item_id":"msg_resp_r_0","output_index":0,"content_index":0`;
    const item = `{"type":"message","id":"msg_resp_r_0","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hi.","annotations":[]}]}`;
    expect(await res.text()).toBe(
      ev("response.created", 0, `,"response":${resp("in_progress", "", "null")}`) +
        ev("response.in_progress", 1, `,"response":${resp("in_progress", "", "null")}`) +
        ev("response.output_item.added", 2, `,"output_index":0,"item":{"type":"message","id":"msg_resp_r_0","status":"in_progress","role":"assistant","content":[]}`) +
        ev("response.content_part.added", 3, `,${at},"part":{"type":"output_text","text":"","annotations":[]}`) +
        ev("response.output_text.delta", 4, `,${at},"delta":"Hi."`) +
        ev("response.output_text.done", 5, `,${at},"text":"Hi."`) +
        ev("response.content_part.done", 6, `,${at},"part":{"type":"output_text","text":"Hi.","annotations":[]}`) +
        ev("response.output_item.done", 7, `,"output_index":0,"item":${item}`) +
        ev("response.completed", 8, `,"response":${resp("completed", item, `{"input_tokens":9,"input_tokens_details":{"cached_tokens":0},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":12}`)}`),
    );
  });
});
