/**
 * Qwen3's chat template as straight-line TypeScript, for the proxy's hot path.
 *
 * The proxy renders every call's new messages (chat-template.ts); through the
 * jinja interpreter that was ~0.15 ms of the ~0.5 ms between a request's body
 * and its engine call. This renders the same text directly. It is used only for
 * a template whose source hashes to QWEN3_TEMPLATE_SHA256 (the template Qwen3's
 * tokenizer_config.json ships), never guessed from its look; any other template
 * goes through the interpreter. Equal to @huggingface/jinja's rendering of that
 * source, string for string, including that library's readings of the
 * template: `strip`, `lstrip` and `rstrip` ignore their argument and trim all
 * whitespace (JS trim), and `tojson` writes ", " and ": " separators and
 * non-ASCII as is (qwen3-template.test.ts compares the two on random
 * conversations). Written by hand rather than compiled from the jinja AST: no
 * maintained jinja-to-JS compiler exists for this dialect, and one template
 * the proxy serves most is the case that matters.
 */
import type { ChatMessage, ToolSpec } from "./chat.ts";

/** SHA-256 (hex) of the template source this module renders. */
export const QWEN3_TEMPLATE_SHA256 = "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5";

const TOOLS_HEAD = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const TOOLS_TAIL =
  '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n';

/** The jinja library's `tojson` of a value built from JSON (module doc). */
function tojson(value: unknown): string {
  if (value === null || value === undefined) return "null";
  if (typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(tojson).join(", ")}]`;
  return `{${Object.entries(value as Record<string, unknown>)
    .map(([k, v]) => `${JSON.stringify(k)}: ${tojson(v)}`)
    .join(", ")}}`;
}

function toolJson(t: ToolSpec): string {
  const fn: Record<string, unknown> = { name: t.name };
  if (t.description !== undefined) fn["description"] = t.description;
  fn["parameters"] = t.parameters;
  return tojson({ type: "function", function: fn });
}

function parsedArguments(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

/**
 * The rendering of `messages` and `tools`; null for an empty conversation
 * (the caller lets the interpreter say what it makes of that).
 */
export function renderQwen3(messages: ChatMessage[], tools: ToolSpec[], addGenerationPrompt: boolean, enableThinking: boolean | undefined): string | null {
  const n = messages.length;
  if (n === 0) return null;
  const first = messages[0]!;
  let out = "";
  if (tools.length > 0) {
    out += "<|im_start|>system\n";
    if (first.role === "system") out += first.content + "\n\n";
    out += TOOLS_HEAD;
    for (const t of tools) out += "\n" + toolJson(t);
    out += TOOLS_TAIL;
  } else if (first.role === "system") out += "<|im_start|>system\n" + first.content + "<|im_end|>\n";
  // The last user message that is a query, not a tool response wrapped as one.
  let lastQuery = n - 1;
  for (let i = n - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role === "user" && !(m.content.startsWith("<tool_response>") && m.content.endsWith("</tool_response>"))) {
      lastQuery = i;
      break;
    }
  }
  for (let i = 0; i < n; i++) {
    const m = messages[i]!;
    if (m.role === "user" || (m.role === "system" && i > 0)) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    else if (m.role === "assistant") {
      let content = m.content;
      let reasoning = "";
      if (m.reasoning !== undefined && m.reasoning !== null) reasoning = m.reasoning;
      else if (content.includes("</think>")) {
        const parts = content.split("</think>");
        content = parts[parts.length - 1]!.trimStart();
        const before = parts[0]!.trimEnd().split("<think>");
        reasoning = before[before.length - 1]!.trimStart();
      }
      if (i > lastQuery && (i === n - 1 || reasoning !== ""))
        out += "<|im_start|>" + m.role + "\n<think>\n" + reasoning.trim() + "\n</think>\n\n" + content.trimStart();
      else out += "<|im_start|>" + m.role + "\n" + content;
      const calls = m.tool_calls;
      if (calls && calls.length > 0)
        for (let j = 0; j < calls.length; j++) {
          if (j > 0 || content !== "") out += "\n";
          const args = parsedArguments(calls[j]!.arguments);
          out += '<tool_call>\n{"name": "' + calls[j]!.name + '", "arguments": ' + (typeof args === "string" ? args : tojson(args)) + "}\n</tool_call>";
        }
      out += "<|im_end|>\n";
    } else if (m.role === "tool") {
      if (i === 0 || messages[i - 1]!.role !== "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i === n - 1 || messages[i + 1]!.role !== "tool") out += "<|im_end|>\n";
    }
  }
  if (addGenerationPrompt) {
    out += "<|im_start|>assistant\n";
    if (enableThinking === false) out += "<think>\n\n</think>\n\n";
  }
  return out;
}
