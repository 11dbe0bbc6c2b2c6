/**
 * OpenAI Chat Completions (`POST /v1/chat/completions`) to and from the
 * neutral ChatRequest. Shapes follow the OpenAI API reference ("Create chat
 * completion", "The chat completion chunk object"): a stream starts with a
 * delta carrying the role, tool calls stream as `{index, id, type, function}`
 * then argument fragments, the last choice chunk has `finish_reason`, and with
 * `stream_options.include_usage` every chunk has `usage: null` except a final
 * chunk with empty `choices` and the usage; the stream ends with `data: [DONE]`.
 */
import type { ServerResponse } from "node:http";
import type { ChatMessage, ChatRequest, ReplyStop, ToolCall, ToolChoice, ToolSpec } from "./chat.ts";
import { InvalidRequestError } from "./errors.ts";
import { SseWriter } from "./sse.ts";
import type { ReplyEvent, Usage } from "./turn-runner.ts";
import { arr, obj, optBool, optInt, optNum, optSeed, optStr, optTopP, ParsedValues, str, toolName, toolSchema, type Json } from "./validate.ts";

export interface OpenAIChatCall {
  req: ChatRequest;
  includeUsage: boolean;
}

const parsedMessages = new ParsedValues<ChatMessage>();
const parsedTools = new ParsedValues<ToolSpec[]>();

export function parseChatCompletions(body: unknown): OpenAIChatCall {
  const b = obj(body, "body");
  const model = str(b["model"], "model");
  const messages = arr(b["messages"], "messages").map((m, i) => parsedMessages.get(m, (raw) => parseMessage(raw, `messages[${i}]`)));
  if (messages.length === 0) throw new InvalidRequestError("messages: must not be empty", "messages");
  const tools =
    b["tools"] === undefined || b["tools"] === null ? [] : parsedTools.get(b["tools"], (raw) => arr(raw, "tools").map((t, i) => parseTool(t, `tools[${i}]`)));
  const n = optInt(b["n"], "n", 1);
  if (n !== undefined && n !== 1) throw new InvalidRequestError("n: only n = 1 is supported", "n");
  const so = b["stream_options"] === undefined || b["stream_options"] === null ? {} : obj(b["stream_options"], "stream_options");
  const kwargs = b["chat_template_kwargs"] === undefined ? {} : obj(b["chat_template_kwargs"], "chat_template_kwargs");
  optBool(b["parallel_tool_calls"], "parallel_tool_calls");
  const enableThinking = optBool(kwargs["enable_thinking"], "chat_template_kwargs.enable_thinking");
  const maxTokens = optInt(b["max_completion_tokens"], "max_completion_tokens", 1) ?? optInt(b["max_tokens"], "max_tokens", 1);
  const req: ChatRequest = {
    model,
    messages,
    tools,
    tool_choice: parseToolChoice(b["tool_choice"], tools),
    sampling: {},
    stream: optBool(b["stream"], "stream") ?? false,
  };
  const temperature = optNum(b["temperature"], "temperature", 0, 2);
  const topP = optTopP(b["top_p"], "top_p");
  const seed = optSeed(b["seed"], "seed");
  if (temperature !== undefined) req.sampling.temperature = temperature;
  if (topP !== undefined) req.sampling.top_p = topP;
  if (maxTokens !== undefined) req.sampling.max_tokens = maxTokens;
  if (seed !== undefined) req.sampling.seed = seed;
  if (enableThinking !== undefined) req.enable_thinking = enableThinking;
  return { req, includeUsage: optBool(so["include_usage"], "stream_options.include_usage") ?? false };
}

/** Content is a string, null, or an array of text parts. */
function contentText(v: unknown, path: string): string {
  if (v === undefined || v === null) return "";
  if (typeof v === "string") return v;
  return arr(v, path)
    .map((p, i) => {
      const part = obj(p, `${path}[${i}]`);
      const type = str(part["type"], `${path}[${i}].type`);
      if (type === "text") return str(part["text"], `${path}[${i}].text`);
      throw new InvalidRequestError(`${path}[${i}].type: only text parts are supported, got ${JSON.stringify(type)}`, path);
    })
    .join("");
}

function parseMessage(v: unknown, path: string): ChatMessage {
  const m = obj(v, path);
  const role = str(m["role"], `${path}.role`);
  const content = contentText(m["content"], `${path}.content`);
  switch (role) {
    case "system":
    case "developer":
      return { role: "system", content };
    case "user":
      return { role: "user", content };
    case "tool":
      return { role: "tool", content, tool_call_id: str(m["tool_call_id"], `${path}.tool_call_id`) };
    case "assistant": {
      const out: ChatMessage = { role: "assistant", content };
      const reasoning = optStr(m["reasoning_content"], `${path}.reasoning_content`);
      if (reasoning !== undefined) out.reasoning = reasoning;
      if (m["tool_calls"] !== undefined && m["tool_calls"] !== null)
        out.tool_calls = arr(m["tool_calls"], `${path}.tool_calls`).map((c, i): ToolCall => {
          const p = `${path}.tool_calls[${i}]`;
          const call = obj(c, p);
          const fn = obj(call["function"], `${p}.function`);
          return { id: str(call["id"], `${p}.id`), name: str(fn["name"], `${p}.function.name`), arguments: str(fn["arguments"], `${p}.function.arguments`) };
        });
      return out;
    }
    default:
      throw new InvalidRequestError(`${path}.role: unknown role ${JSON.stringify(role)}`, `${path}.role`);
  }
}

function parseTool(v: unknown, path: string): ToolSpec {
  const t = obj(v, path);
  if (t["type"] !== "function") throw new InvalidRequestError(`${path}.type: only "function" tools are supported`, `${path}.type`);
  const fn = obj(t["function"], `${path}.function`);
  const spec: ToolSpec = { name: toolName(fn["name"], `${path}.function.name`), parameters: toolSchema(fn["parameters"], `${path}.function.parameters`) };
  const description = optStr(fn["description"], `${path}.function.description`);
  if (description !== undefined) spec.description = description;
  return spec;
}

function parseToolChoice(v: unknown, tools: ToolSpec[]): ToolChoice {
  if (v === undefined || v === null) return "auto";
  if (v === "required" && tools.length === 0) throw new InvalidRequestError('tool_choice: "required" needs at least one tool in tools', "tool_choice");
  if (v === "auto" || v === "none" || v === "required") return v;
  if (typeof v === "string") throw new InvalidRequestError(`tool_choice: unknown value ${JSON.stringify(v)}`, "tool_choice");
  const fn = obj(obj(v, "tool_choice")["function"], "tool_choice.function");
  const name = str(fn["name"], "tool_choice.function.name");
  if (!tools.some((t) => t.name === name)) throw new InvalidRequestError(`tool_choice names unknown tool ${JSON.stringify(name)}`, "tool_choice");
  return { name };
}

export interface ReplyMeta {
  id: string;
  created: number;
  model: string;
}

const FINISH: Record<ReplyStop, string> = { end_turn: "stop", tool_calls: "tool_calls", max_tokens: "length" };

function usageJson(u: Usage): Json {
  return { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.prompt_tokens + u.completion_tokens };
}

function toolCallJson(c: ToolCall): Json {
  return { id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } };
}

/** Collects the events into one `chat.completion` object. */
export async function writeChatCompletion(events: AsyncIterable<ReplyEvent>, res: ServerResponse, meta: ReplyMeta): Promise<void> {
  for await (const e of events) {
    if (e.kind !== "done") continue;
    const message: Json = { role: "assistant", content: e.reply.content === "" && e.reply.tool_calls.length > 0 ? null : e.reply.content };
    if (e.reply.reasoning !== null) message["reasoning_content"] = e.reply.reasoning;
    if (e.reply.tool_calls.length > 0) message["tool_calls"] = e.reply.tool_calls.map(toolCallJson);
    const body = {
      id: meta.id,
      object: "chat.completion",
      created: meta.created,
      model: meta.model,
      choices: [{ index: 0, message, logprobs: null, finish_reason: FINISH[e.stop] }],
      usage: usageJson(e.usage),
    };
    const text = JSON.stringify(body);
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
    res.end(text);
  }
}

/** Streams `chat.completion.chunk` events. Errors after the first byte go out as a `data: {"error":…}` event. */
export async function streamChatCompletion(
  events: AsyncIterable<ReplyEvent>,
  sse: SseWriter,
  meta: ReplyMeta,
  includeUsage: boolean,
): Promise<void> {
  const chunk = (delta: Json, finish: string | null): Json => {
    const c: Json = { id: meta.id, object: "chat.completion.chunk", created: meta.created, model: meta.model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] };
    if (includeUsage) c["usage"] = null;
    return c;
  };
  let calls = 0;
  sse.sendJson(chunk({ role: "assistant", content: "" }, null));
  for await (const e of events) {
    if (e.kind === "start") continue;
    if (e.kind === "text") sse.sendJson(chunk({ content: e.text }, null));
    else if (e.kind === "reasoning") sse.sendJson(chunk({ reasoning_content: e.text }, null));
    else if (e.kind === "tool_call") {
      const index = calls++;
      sse.sendJson(chunk({ tool_calls: [{ index, id: e.call.id, type: "function", function: { name: e.call.name, arguments: "" } }] }, null));
      sse.sendJson(chunk({ tool_calls: [{ index, function: { arguments: e.call.arguments } }] }, null));
    } else {
      sse.sendJson(chunk({}, FINISH[e.stop]));
      if (includeUsage)
        sse.sendJson({ id: meta.id, object: "chat.completion.chunk", created: meta.created, model: meta.model, choices: [], usage: usageJson(e.usage) });
      sse.send("[DONE]");
    }
  }
}
