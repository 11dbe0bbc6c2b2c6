/**
 * Anthropic Messages (`POST /v1/messages`, also `?beta=true` as Claude Code
 * sends it) to and from the neutral ChatRequest.
 *
 * Streaming follows the Anthropic docs "Streaming Messages": `message_start`,
 * then per content block `content_block_start` / `content_block_delta`
 * (`thinking_delta`, `text_delta`, `input_json_delta`) / `content_block_stop`,
 * then `message_delta` (stop_reason + output usage) and `message_stop`; `ping`
 * may appear anywhere (we send one after message_start, as the API does).
 * System blocks join into one system message; a `role:"system"` message in the
 * middle of the conversation (Claude Code) stays a system message in place;
 * `cache_control` markers are accepted and ignored.
 *
 * Deferred tools (Anthropic docs "Tool search tool"): a tool with
 * `defer_loading: true` is declared but kept out of the prompt, until a tool
 * result references it with a `tool_reference` block (Claude Code's ToolSearch
 * returns them). The API expands each reference into the tool's definition in
 * the same encoding as the prompt's own tool list; Claude Code's ToolSearch
 * description tells the model to expect a `<functions>` block with one
 * `<function>{"description": ..., "name": ..., "parameters": ...}</function>`
 * line per tool, so that is the text the reference becomes.
 */
import type { ServerResponse } from "node:http";
import type { ChatMessage, ChatRequest, ReplyStop, ToolChoice, ToolSpec } from "./chat.ts";
import { InvalidRequestError } from "./errors.ts";
import type { SseWriter } from "./sse.ts";
import type { ReplyEvent } from "./turn-runner.ts";
import { arr, obj, optBool, optInt, optNum, optStr, optTopP, ParsedValues, str, toolName, toolSchema, type Json } from "./validate.ts";

/** A request's tools: those the prompt shows and the deferred ones. */
interface DeclaredTools {
  shown: ToolSpec[];
  deferred: ToolSpec[];
}

const NO_TOOLS: DeclaredTools = { shown: [], deferred: [] };
/**
 * Parsed messages per tool list: a tool_reference renders the named tool's definition, so a
 * message parses per list (the same object while the harness resends the same list).
 */
const parsedMessages = new WeakMap<DeclaredTools, ParsedValues<ChatMessage[]>>();
const parsedSystems = new ParsedValues<string | null>();
const parsedTools = new ParsedValues<DeclaredTools>();

/** Parses a Messages body; `countOnly` is for count_tokens, where max_tokens is absent. */
export function parseMessagesRequest(body: unknown, countOnly = false): ChatRequest {
  const b = obj(body, "body");
  const model = str(b["model"], "model");
  const maxTokens = optInt(b["max_tokens"], "max_tokens", 1);
  if (!countOnly && maxTokens === undefined) throw new InvalidRequestError("max_tokens: required", "max_tokens");
  const declared = b["tools"] === undefined || b["tools"] === null ? NO_TOOLS : parsedTools.get(b["tools"], declaredTools);
  let byMessage = parsedMessages.get(declared);
  if (!byMessage) parsedMessages.set(declared, (byMessage = new ParsedValues()));
  const messages: ChatMessage[] = [];
  const system = parsedSystems.get(b["system"], systemText);
  if (system !== null) messages.push({ role: "system", content: system });
  arr(b["messages"], "messages").forEach((m, i) => messages.push(...byMessage.get(m, (raw) => parseMessage(raw, `messages.${i}`, declared))));
  if (messages.length === 0 || messages.every((m) => m.role === "system"))
    throw new InvalidRequestError("messages: at least one message is required", "messages");
  const last = messages[messages.length - 1]!;
  const prefill = last.role === "assistant";
  if (prefill) {
    // Anthropic: "the response content will continue immediately from the content in that message".
    if (last.tool_calls?.length) throw new InvalidRequestError("messages: a final assistant message (prefill) cannot hold tool_use blocks", "messages");
    if (last.content.length === 0) throw new InvalidRequestError("messages: a final assistant message (prefill) must have text to continue", "messages");
    if (/\s$/.test(last.content)) throw new InvalidRequestError("messages: final assistant content cannot end with trailing whitespace", "messages");
  }
  const tools = declared.shown;
  const req: ChatRequest = { model, messages, tools, tool_choice: parseToolChoice(b["tool_choice"], declared), sampling: {}, stream: optBool(b["stream"], "stream") ?? false };
  if (declared.deferred.length > 0) req.deferred_tools = declared.deferred;
  if (prefill) req.continue_final_message = true;
  if (maxTokens !== undefined) req.sampling.max_tokens = maxTokens;
  const temperature = optNum(b["temperature"], "temperature", 0, 1);
  const topP = optTopP(b["top_p"], "top_p");
  if (temperature !== undefined) req.sampling.temperature = temperature;
  if (topP !== undefined) req.sampling.top_p = topP;
  if (b["thinking"] !== undefined && b["thinking"] !== null) {
    const type = str(obj(b["thinking"], "thinking")["type"], "thinking.type");
    req.enable_thinking = type !== "disabled";
  }
  return req;
}

function systemText(v: unknown): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v === "string") return v;
  return arr(v, "system")
    .map((blk, i) => {
      const t = obj(blk, `system.${i}`);
      if (t["type"] !== "text") throw new InvalidRequestError(`system.${i}.type: expected "text"`, "system");
      return str(t["text"], `system.${i}.text`);
    })
    .join("\n");
}

/** Text of a tool_result's content (string or text/image/tool_reference blocks). */
function resultText(v: unknown, path: string, tools: DeclaredTools): string {
  if (v === undefined || v === null) return "";
  if (typeof v === "string") return v;
  const parts: string[] = [];
  let referenced: ToolSpec[] = [];
  const flush = () => {
    if (referenced.length > 0) parts.push(functionsBlock(referenced));
    referenced = [];
  };
  arr(v, path).forEach((blk, i) => {
    const t = obj(blk, `${path}.${i}`);
    if (t["type"] === "tool_reference") {
      const name = str(t["tool_name"], `${path}.${i}.tool_name`);
      const tool = tools.deferred.find((x) => x.name === name) ?? tools.shown.find((x) => x.name === name);
      if (!tool) throw new InvalidRequestError(`${path}.${i}.tool_name: the request declares no tool ${JSON.stringify(name)}`, `${path}.${i}.tool_name`);
      referenced.push(tool);
      return;
    }
    flush();
    if (t["type"] === "text") parts.push(str(t["text"], `${path}.${i}.text`));
    else if (t["type"] === "image") parts.push("[image]");
    else throw new InvalidRequestError(`${path}.${i}.type: unsupported block ${JSON.stringify(t["type"])}`, path);
  });
  flush();
  return parts.join("\n");
}

/** Tool definitions as the API expands tool references: one `<function>` line per tool in a `<functions>` block. */
function functionsBlock(tools: ToolSpec[]): string {
  const lines = tools.map((t) => {
    const def: Record<string, unknown> = {};
    if (t.description !== undefined) def["description"] = t.description;
    def["name"] = t.name;
    def["parameters"] = t.parameters;
    return `<function>${spacedJson(def)}</function>`;
  });
  return `<functions>\n${lines.join("\n")}\n</functions>`;
}

/** JSON with a space after every `,` and `:` between items, as the tool list's encoding writes it. */
function spacedJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(spacedJson).join(", ")}]`;
  if (v && typeof v === "object")
    return `{${Object.entries(v)
      .filter(([, x]) => x !== undefined)
      .map(([k, x]) => `${JSON.stringify(k)}: ${spacedJson(x)}`)
      .join(", ")}}`;
  return JSON.stringify(v) ?? "null";
}

function parseMessage(v: unknown, path: string, tools: DeclaredTools): ChatMessage[] {
  const m = obj(v, path);
  const role = str(m["role"], `${path}.role`);
  if (role !== "user" && role !== "assistant" && role !== "system")
    throw new InvalidRequestError(`${path}.role: expected "user", "assistant" or "system"`, `${path}.role`);
  const c = m["content"];
  if (typeof c === "string") return [{ role, content: c }];
  const blocks = arr(c, `${path}.content`).map((blk, i) => obj(blk, `${path}.content.${i}`));
  if (role === "assistant") {
    const out: ChatMessage = { role, content: "" };
    blocks.forEach((blk, i) => {
      const p = `${path}.content.${i}`;
      switch (blk["type"]) {
        case "text":
          out.content += str(blk["text"], `${p}.text`);
          break;
        case "thinking":
          out.reasoning = (out.reasoning ?? "") + str(blk["thinking"], `${p}.thinking`);
          break;
        case "redacted_thinking":
          break;
        case "tool_use":
          (out.tool_calls ??= []).push({ id: str(blk["id"], `${p}.id`), name: str(blk["name"], `${p}.name`), arguments: JSON.stringify(obj(blk["input"], `${p}.input`)) });
          break;
        default:
          throw new InvalidRequestError(`${p}.type: unsupported assistant block ${JSON.stringify(blk["type"])}`, p);
      }
    });
    return [out];
  }
  // user / system: tool results become tool messages (in order), remaining text a user message after them.
  const out: ChatMessage[] = [];
  let text: string | null = null;
  blocks.forEach((blk, i) => {
    const p = `${path}.content.${i}`;
    switch (blk["type"]) {
      case "text":
        text = (text === null ? "" : text + "\n") + str(blk["text"], `${p}.text`);
        break;
      case "image":
      case "document":
        text = (text === null ? "" : text + "\n") + `[${blk["type"]}]`;
        break;
      case "tool_result": {
        const body = resultText(blk["content"], `${p}.content`, tools);
        const isError = optBool(blk["is_error"], `${p}.is_error`) ?? false;
        out.push({ role: "tool", tool_call_id: str(blk["tool_use_id"], `${p}.tool_use_id`), content: isError ? `Error: ${body}` : body });
        break;
      }
      default:
        throw new InvalidRequestError(`${p}.type: unsupported block ${JSON.stringify(blk["type"])}`, p);
    }
  });
  if (text !== null) out.push({ role, content: text });
  return out;
}

function declaredTools(raw: unknown): DeclaredTools {
  const out: DeclaredTools = { shown: [], deferred: [] };
  arr(raw, "tools").forEach((t, i) => {
    const parsed = parseTool(t, `tools.${i}`);
    if (parsed) (parsed.deferred ? out.deferred : out.shown).push(parsed.spec);
  });
  return out;
}

/** Client tools only; server tools (web search, ...) have a `type` and no input_schema and cannot be served. */
function parseTool(v: unknown, path: string): { spec: ToolSpec; deferred: boolean } | null {
  const t = obj(v, path);
  if (t["type"] !== undefined && t["type"] !== "custom" && t["input_schema"] === undefined) return null;
  if (t["input_schema"] === undefined) throw new InvalidRequestError(`${path}.input_schema: required`, `${path}.input_schema`);
  const spec: ToolSpec = { name: toolName(t["name"], `${path}.name`), parameters: toolSchema(t["input_schema"], `${path}.input_schema`) };
  const d = optStr(t["description"], `${path}.description`);
  if (d !== undefined) spec.description = d;
  return { spec, deferred: optBool(t["defer_loading"], `${path}.defer_loading`) ?? false };
}

function parseToolChoice(v: unknown, declared: DeclaredTools): ToolChoice {
  if (v === undefined || v === null) return "auto";
  const c = obj(v, "tool_choice");
  switch (c["type"]) {
    case "auto":
      return "auto";
    case "any":
      if (declared.shown.length + declared.deferred.length === 0)
        throw new InvalidRequestError('tool_choice: type "any" needs at least one tool in tools', "tool_choice");
      return "required";
    case "none":
      return "none";
    case "tool": {
      const name = str(c["name"], "tool_choice.name");
      if (!declared.shown.some((t) => t.name === name) && !declared.deferred.some((t) => t.name === name))
        throw new InvalidRequestError(`tool_choice names unknown tool ${JSON.stringify(name)}`, "tool_choice");
      return { name };
    }
    default:
      throw new InvalidRequestError(`tool_choice.type: unknown ${JSON.stringify(c["type"])}`, "tool_choice");
  }
}

export interface MessageMeta {
  id: string;
  model: string;
}

const STOP: Record<ReplyStop, string> = { end_turn: "end_turn", tool_calls: "tool_use", max_tokens: "max_tokens" };

function usageJson(input: number, output: number): Json {
  return { input_tokens: input, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: output };
}

export async function writeMessage(events: AsyncIterable<ReplyEvent>, res: ServerResponse, meta: MessageMeta): Promise<void> {
  for await (const e of events) {
    if (e.kind !== "done") continue;
    const content: Json[] = [];
    if (e.reply.reasoning !== null) content.push({ type: "thinking", thinking: e.reply.reasoning, signature: "" });
    if (e.reply.content !== "" || e.reply.tool_calls.length === 0) content.push({ type: "text", text: e.reply.content });
    for (const c of e.reply.tool_calls) content.push({ type: "tool_use", id: c.id, name: c.name, input: JSON.parse(c.arguments) });
    const text = JSON.stringify({
      id: meta.id,
      type: "message",
      role: "assistant",
      model: meta.model,
      content,
      stop_reason: STOP[e.stop],
      stop_sequence: null,
      usage: usageJson(e.usage.prompt_tokens, e.usage.completion_tokens),
    });
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
    res.end(text);
  }
}

export async function streamMessage(events: AsyncIterable<ReplyEvent>, sse: SseWriter, meta: MessageMeta, promptTokens: number): Promise<void> {
  const send = (type: string, body: Json) => sse.sendJson({ type, ...body }, type);
  send("message_start", {
    message: { id: meta.id, type: "message", role: "assistant", model: meta.model, content: [], stop_reason: null, stop_sequence: null, usage: usageJson(promptTokens, 0) },
  });
  send("ping", {});
  let index = -1;
  let open: "thinking" | "text" | null = null;
  const close = () => {
    if (open !== null) send("content_block_stop", { index });
    open = null;
  };
  for await (const e of events) {
    if (e.kind === "start") continue;
    if (e.kind === "reasoning" || e.kind === "text") {
      const type = e.kind === "reasoning" ? "thinking" : "text";
      if (open !== type) {
        close();
        open = type;
        index++;
        send("content_block_start", { index, content_block: type === "text" ? { type, text: "" } : { type, thinking: "", signature: "" } });
      }
      const delta = type === "text" ? { type: "text_delta", text: e.text } : { type: "thinking_delta", thinking: e.text };
      send("content_block_delta", { index, delta });
    } else if (e.kind === "tool_call") {
      close();
      index++;
      send("content_block_start", { index, content_block: { type: "tool_use", id: e.call.id, name: e.call.name, input: {} } });
      send("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: e.call.arguments } });
      send("content_block_stop", { index });
    } else {
      if (index < 0) {
        // An empty reply still carries one (empty) text block, as the non-streaming shape does.
        index = 0;
        open = "text";
        send("content_block_start", { index, content_block: { type: "text", text: "" } });
      }
      close();
      send("message_delta", { delta: { stop_reason: STOP[e.stop], stop_sequence: null }, usage: { output_tokens: e.usage.completion_tokens } });
      send("message_stop", {});
    }
  }
}
