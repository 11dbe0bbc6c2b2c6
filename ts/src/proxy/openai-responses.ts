/**
 * OpenAI Responses API (`POST /v1/responses`, spoken by Codex CLI) to and
 * from the neutral ChatRequest. Stateless: `previous_response_id` is refused
 * (the harness must send the whole input, as Codex does with `store: false`).
 * Stream events follow the OpenAI reference "Streaming events": response.created,
 * response.in_progress, response.output_item.added, response.content_part.added,
 * response.output_text.delta/.done, response.content_part.done,
 * response.function_call_arguments.delta/.done, response.output_item.done,
 * response.completed; each carries a `sequence_number`. A failure after the
 * first event goes out as an `error` event, then `response.failed`.
 *
 * Input items are read back into turns the way the proxy writes them: a reply's
 * reasoning item, message item and function calls are one assistant turn.
 */
import type { ServerResponse } from "node:http";
import type { AssistantReply, ChatMessage, ChatRequest, ToolSpec } from "./chat.ts";
import { ClientGoneError, InvalidRequestError, asProxyError, errorBody } from "./errors.ts";
import type { SseWriter } from "./sse.ts";
import type { ReplyEvent, Usage } from "./turn-runner.ts";
import { arr, obj, optBool, optInt, optNum, optStr, optTopP, str, toolName, toolSchema, type Json } from "./validate.ts";

export function parseResponsesRequest(body: unknown): ChatRequest {
  const b = obj(body, "body");
  const model = str(b["model"], "model");
  if (b["previous_response_id"] !== undefined && b["previous_response_id"] !== null)
    throw new InvalidRequestError("previous_response_id: the proxy is stateless; send the full input", "previous_response_id");
  const messages: ChatMessage[] = [];
  const instructions = optStr(b["instructions"], "instructions");
  if (instructions !== undefined) messages.push({ role: "system", content: instructions });
  const input = b["input"];
  if (typeof input === "string") messages.push({ role: "user", content: input });
  else arr(input, "input").forEach((item, i) => addItem(messages, obj(item, `input[${i}]`), `input[${i}]`));
  if (messages.length === 0) throw new InvalidRequestError("input: must not be empty", "input");
  const tools: ToolSpec[] = [];
  if (b["tools"] !== undefined && b["tools"] !== null)
    arr(b["tools"], "tools").forEach((t, i) => {
      const tool = obj(t, `tools[${i}]`);
      if (tool["type"] !== "function") return; // built-in tools (web_search, ...) cannot be served
      const spec: ToolSpec = { name: toolName(tool["name"], `tools[${i}].name`), parameters: toolSchema(tool["parameters"], `tools[${i}].parameters`) };
      const d = optStr(tool["description"], `tools[${i}].description`);
      if (d !== undefined) spec.description = d;
      tools.push(spec);
    });
  const tc = b["tool_choice"];
  if (tc === "required" && tools.length === 0) throw new InvalidRequestError('tool_choice: "required" needs at least one tool in tools', "tool_choice");
  const req: ChatRequest = {
    model,
    messages,
    tools,
    tool_choice: tc === "none" || tc === "required" ? tc : "auto",
    sampling: {},
    stream: optBool(b["stream"], "stream") ?? false,
  };
  const maxTokens = optInt(b["max_output_tokens"], "max_output_tokens", 1);
  const temperature = optNum(b["temperature"], "temperature", 0, 2);
  const topP = optTopP(b["top_p"], "top_p");
  if (maxTokens !== undefined) req.sampling.max_tokens = maxTokens;
  if (temperature !== undefined) req.sampling.temperature = temperature;
  if (topP !== undefined) req.sampling.top_p = topP;
  return req;
}

function itemText(v: unknown, path: string): string {
  if (typeof v === "string") return v;
  return arr(v, path)
    .map((p, i) => {
      const part = obj(p, `${path}[${i}]`);
      const type = part["type"];
      if (type === "input_text" || type === "output_text" || type === "text") return str(part["text"], `${path}[${i}].text`);
      throw new InvalidRequestError(`${path}[${i}].type: unsupported content ${JSON.stringify(type)}`, path);
    })
    .join("");
}

function addItem(out: ChatMessage[], item: Json, path: string): void {
  const type = item["type"] ?? "message";
  const last = out[out.length - 1];
  if (type === "message") {
    const role = str(item["role"], `${path}.role`);
    const content = itemText(item["content"], `${path}.content`);
    if (role === "developer" || role === "system") out.push({ role: "system", content });
    // A reply's reasoning item comes before its message item: together they are one turn.
    else if (role === "assistant" && last && last.role === "assistant" && last.content === "" && !last.tool_calls && last.reasoning != null) last.content = content;
    else if (role === "user" || role === "assistant") out.push({ role, content });
    else throw new InvalidRequestError(`${path}.role: unknown role ${JSON.stringify(role)}`, `${path}.role`);
  } else if (type === "function_call") {
    const call = { id: str(item["call_id"], `${path}.call_id`), name: str(item["name"], `${path}.name`), arguments: str(item["arguments"], `${path}.arguments`) };
    // Consecutive calls belong to one assistant turn.
    if (last && last.role === "assistant") (last.tool_calls ??= []).push(call);
    else out.push({ role: "assistant", content: "", tool_calls: [call] });
  } else if (type === "function_call_output") {
    const output = item["output"];
    out.push({ role: "tool", tool_call_id: str(item["call_id"], `${path}.call_id`), content: typeof output === "string" ? output : itemText(output, `${path}.output`) });
  } else if (type === "reasoning") {
    const summary = Array.isArray(item["summary"]) ? item["summary"].map((s) => (s as Json)["text"]).filter((t) => typeof t === "string").join("\n") : "";
    if (last && last.role === "assistant" && !last.content && !last.tool_calls) last.reasoning = summary;
    else out.push({ role: "assistant", content: "", reasoning: summary });
  } else throw new InvalidRequestError(`${path}.type: unsupported item ${JSON.stringify(type)}`, `${path}.type`);
}

export interface ResponseMeta {
  id: string;
  created: number;
  model: string;
}

function outputItems(meta: ResponseMeta, reply: AssistantReply): Json[] {
  const items: Json[] = [];
  if (reply.reasoning !== null) items.push(reasoningItem(meta, reply.reasoning));
  if (reply.content !== "" || reply.tool_calls.length === 0) items.push(messageItem(meta, reply.content, "completed"));
  reply.tool_calls.forEach((c, i) => items.push({ type: "function_call", id: `fc_${meta.id}_${i}`, call_id: c.id, name: c.name, arguments: c.arguments, status: "completed" }));
  return items;
}

const reasoningItem = (meta: ResponseMeta, text: string): Json => ({ type: "reasoning", id: `rs_${meta.id}`, summary: [{ type: "summary_text", text }] });
const messageItem = (meta: ResponseMeta, text: string, status: string): Json => ({
  type: "message",
  id: `msg_${meta.id}`,
  status,
  role: "assistant",
  content: status === "completed" ? [{ type: "output_text", text, annotations: [] }] : [],
});

function responseJson(meta: ResponseMeta, status: string, output: Json[], usage: Usage | null, incomplete: boolean): Json {
  return {
    id: meta.id,
    object: "response",
    created_at: meta.created,
    status,
    error: null,
    incomplete_details: incomplete ? { reason: "max_output_tokens" } : null,
    model: meta.model,
    output,
    parallel_tool_calls: true,
    usage: usage && {
      input_tokens: usage.prompt_tokens,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: usage.completion_tokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: usage.prompt_tokens + usage.completion_tokens,
    },
  };
}

export async function writeResponse(events: AsyncIterable<ReplyEvent>, res: ServerResponse, meta: ResponseMeta): Promise<void> {
  for await (const e of events) {
    if (e.kind !== "done") continue;
    const incomplete = e.stop === "max_tokens";
    const text = JSON.stringify(responseJson(meta, incomplete ? "incomplete" : "completed", outputItems(meta, e.reply), e.usage, incomplete));
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
    res.end(text);
  }
}

export async function streamResponse(events: AsyncIterable<ReplyEvent>, sse: SseWriter, meta: ResponseMeta): Promise<void> {
  let seq = 0;
  const send = (type: string, body: Json) => sse.sendJson({ type, sequence_number: seq++, ...body }, type);
  send("response.created", { response: responseJson(meta, "in_progress", [], null, false) });
  send("response.in_progress", { response: responseJson(meta, "in_progress", [], null, false) });
  const done: Json[] = [];
  let text: string | null = null;
  let reasoning: string | null = null;
  const msgId = `msg_${meta.id}`;
  const flushReasoning = () => {
    if (reasoning === null) return;
    const item = reasoningItem(meta, reasoning);
    send("response.output_item.added", { output_index: done.length, item: { ...item, summary: [] } });
    send("response.output_item.done", { output_index: done.length, item });
    done.push(item);
    reasoning = null;
  };
  const flushText = () => {
    if (text === null) return;
    const part = { type: "output_text", text, annotations: [] };
    const at = { item_id: msgId, output_index: done.length, content_index: 0 };
    send("response.output_text.done", { ...at, text });
    send("response.content_part.done", { ...at, part });
    const item = messageItem(meta, text, "completed");
    send("response.output_item.done", { output_index: done.length, item });
    done.push(item);
    text = null;
  };
  try {
    for await (const e of events) {
      if (e.kind === "start") continue;
      if (e.kind === "reasoning") reasoning = (reasoning ?? "") + e.text;
      else if (e.kind === "text") {
        flushReasoning();
        if (text === null) {
          text = "";
          send("response.output_item.added", { output_index: done.length, item: messageItem(meta, "", "in_progress") });
          send("response.content_part.added", { item_id: msgId, output_index: done.length, content_index: 0, part: { type: "output_text", text: "", annotations: [] } });
        }
        text += e.text;
        send("response.output_text.delta", { item_id: msgId, output_index: done.length, content_index: 0, delta: e.text });
      } else if (e.kind === "tool_call") {
        flushReasoning();
        flushText();
        const id = `fc_${meta.id}_${done.filter((d) => d["type"] === "function_call").length}`;
        const item = { type: "function_call", id, call_id: e.call.id, name: e.call.name, arguments: e.call.arguments, status: "completed" };
        send("response.output_item.added", { output_index: done.length, item: { ...item, arguments: "", status: "in_progress" } });
        send("response.function_call_arguments.delta", { item_id: id, output_index: done.length, delta: e.call.arguments });
        send("response.function_call_arguments.done", { item_id: id, output_index: done.length, arguments: e.call.arguments });
        send("response.output_item.done", { output_index: done.length, item });
        done.push(item);
      } else {
        flushReasoning();
        flushText();
        const incomplete = e.stop === "max_tokens";
        send(incomplete ? "response.incomplete" : "response.completed", { response: responseJson(meta, incomplete ? "incomplete" : "completed", done, e.usage, incomplete) });
      }
    }
  } catch (e) {
    if (e instanceof ClientGoneError) throw e;
    // OpenAI reference "Streaming events": an `error` event, and the response ends `failed`.
    const error = errorBody("openai", asProxyError(e))["error"] as { message: string; type: string; param: string | null; code: string | null };
    send("error", { code: error.code ?? error.type, message: error.message, param: error.param });
    send("response.failed", { response: { ...responseJson(meta, "failed", done, null, false), error: { code: "server_error", message: error.message } } });
  }
}
