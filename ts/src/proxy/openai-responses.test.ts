/**
 * OpenAI Responses API (Codex CLI's protocol) through the official `openai`
 * client, and one stream asserted byte for byte.
 */
import OpenAI from "openai";
import type { FunctionTool, ResponseInputItem } from "openai/resources/responses/responses";
import { afterEach, describe, expect, it } from "vitest";
import type { ScriptedReply } from "../engine/scripted.ts";
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
