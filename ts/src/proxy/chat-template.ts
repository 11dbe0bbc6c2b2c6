/**
 * The model's chat template (jinja, from tokenizer_config.json) rendered with
 * @huggingface/jinja.
 *
 * Besides whole renders, the proxy needs two pieces to keep token-in-token-out:
 * the text the template writes after an
 * assistant message's content (Qwen3: "<|im_end|>\n", whose "\n" the engine
 * never samples), and the rendering of only the messages that follow an
 * assistant turn. Re-rendering the whole history would not reproduce what the
 * model saw (Qwen3 drops earlier <think> blocks and re-serializes arguments).
 */
import { createHash } from "node:crypto";
import { setFlagsFromString } from "node:v8";
import { Template } from "@huggingface/jinja";
import type { ChatMessage, ToolSpec } from "./chat.ts";
import { QWEN3_TEMPLATE_SHA256, renderQwen3 } from "./qwen3-template.ts";

export class TemplateError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(`chat template: ${message}`, options);
    this.name = "TemplateError";
  }
}

export interface RenderOptions {
  addGenerationPrompt: boolean;
  enableThinking?: boolean;
}

let v8Tuned = false;

/**
 * Makes @huggingface/jinja about 2.5x faster in this process (a Qwen3 render
 * of one tool result: ~290 -> ~115 us CPU). The interpreter allocates a
 * RuntimeValue per evaluated expression; its dozen value classes share the
 * base class's field initializer, whose property-definition inline cache
 * turns megamorphic at V8's default of 4 tracked maps, and Node 20's V8 then
 * takes a slow path of ~1 us per value, which is most of a render's time.
 * Tracking up to 16 maps keeps that cache polymorphic. The flag only sizes
 * inline caches (no semantics change), but it is process-wide and Node calls
 * changing V8 flags after start-up unsupported, so it is set once, before the
 * first render; a template built with `tuneV8: false` leaves V8's default.
 * Starting node with --max-valid-polymorphic-map-count=16 has the same effect.
 */
export function tuneV8ForTemplates(): void {
  if (v8Tuned) return;
  v8Tuned = true;
  if (!process.execArgv.some((a) => a.startsWith("--max-valid-polymorphic-map-count"))) setFlagsFromString("--max-valid-polymorphic-map-count=16");
}

const toolsJsonOf = new WeakMap<ToolSpec[], string>();

/** JSON text of a request's tool list, computed once per list (the key of the caches that depend on the tools). */
export function toolsJson(tools: ToolSpec[]): string {
  let json = toolsJsonOf.get(tools);
  if (json === undefined) {
    json = JSON.stringify(tools);
    toolsJsonOf.set(tools, json);
  }
  return json;
}

/** Text no real message contains, to find where content sits in a render. */
const MARK = "\u0000lego-mark\u0000";

export class ChatTemplate {
  private readonly template: Template;
  /** Renders with qwen3-template.ts instead of the interpreter: the source is Qwen3's, by hash. */
  readonly native: boolean;
  /** Text the template emits after an assistant message's content (Qwen3: "<|im_end|>\n"). */
  readonly assistantTail: string;
  private readonly stubCache = new Map<string, string>();

  constructor(
    source: string,
    private readonly specialTokens: { eos_token: string | null; bos_token: string | null },
    /**
     * tuneV8: widen V8's inline caches for the interpreter before the first render (see tuneV8ForTemplates).
     * native: render a template this proxy knows by hash (Qwen3's) in TypeScript; false always interprets.
     */
    options: { tuneV8?: boolean; native?: boolean } = {},
  ) {
    if (options.tuneV8 ?? true) tuneV8ForTemplates();
    this.native = (options.native ?? true) && createHash("sha256").update(source).digest("hex") === QWEN3_TEMPLATE_SHA256;
    try {
      this.template = new Template(source);
    } catch (cause) {
      throw new TemplateError("does not parse", { cause });
    }
    const probe = this.render(
      [
        { role: "user", content: "u" },
        { role: "assistant", content: MARK },
      ],
      [],
      { addGenerationPrompt: false },
    );
    const at = probe.lastIndexOf(MARK);
    if (at < 0) throw new TemplateError("does not render assistant content verbatim");
    this.assistantTail = probe.slice(at + MARK.length);
  }

  render(messages: ChatMessage[], tools: ToolSpec[], options: RenderOptions): string {
    if (this.native) {
      const text = renderQwen3(messages, tools, options.addGenerationPrompt, options.enableThinking);
      if (text !== null) return text;
    }
    const vars: Record<string, unknown> = {
      messages: messages.map(templateMessage),
      add_generation_prompt: options.addGenerationPrompt,
      bos_token: this.specialTokens.bos_token ?? "",
      eos_token: this.specialTokens.eos_token ?? "",
    };
    if (tools.length > 0) vars["tools"] = tools.map(templateTool);
    if (options.enableThinking !== undefined) vars["enable_thinking"] = options.enableThinking;
    // @huggingface/jinja looks every variable up through a function that throws, and
    // catches, an Error when the name is not defined (`tools` when none are sent,
    // `enable_thinking`, ...). Capturing those stack traces was half of a continuation
    // render's time; the template needs none of them. Synchronous, so nothing else runs
    // under the lowered limit; a real failure is rethrown with a stack below.
    const stackTraceLimit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      return this.template.render(vars);
    } catch (cause) {
      Error.stackTraceLimit = stackTraceLimit;
      throw new TemplateError(`render failed: ${(cause as Error).message}`, { cause });
    } finally {
      Error.stackTraceLimit = stackTraceLimit;
    }
  }

  /**
   * The text that follows an assistant turn (after `assistantTail`) when
   * `messages` come next: render [stub assistant, ...messages] and drop the
   * stub's own rendering. Null when the template does not render the stub
   * as a prefix (the caller then renders the whole history).
   */
  renderContinuation(messages: ChatMessage[], tools: ToolSpec[], options: RenderOptions): string | null {
    // Rendering the tool list costs more than the new messages themselves
    // (jinja `tojson` of every schema). Most templates (Qwen3's included) put
    // tools only in the leading system block, so the continuation is the same
    // without them; that is checked once per tool list, never assumed.
    const key = toolsJson(tools);
    let toolsMatter = this.toolsMatter.get(key);
    if (toolsMatter === undefined) {
      const withTools = this.continuation(messages, tools, options);
      toolsMatter = withTools !== this.continuation(messages, [], options);
      this.remember(this.toolsMatter, key, toolsMatter);
      return withTools;
    }
    return this.continuation(messages, toolsMatter ? tools : [], options);
  }

  private readonly toolsMatter = new Map<string, boolean>();
  private readonly generationPrompts = new Map<string, string>();

  /**
   * The text `add_generation_prompt` appends (Qwen3: "<|im_start|>assistant\n",
   * plus an empty think block when thinking is off): template-supplied, never
   * written by the harness. Derived by rendering a probe with and without it.
   */
  generationPrompt(options: Omit<RenderOptions, "addGenerationPrompt">): string {
    const key = String(options.enableThinking);
    let gen = this.generationPrompts.get(key);
    if (gen === undefined) {
      const probe: ChatMessage[] = [{ role: "user", content: "u" }];
      const without = this.render(probe, [], { ...options, addGenerationPrompt: false });
      const withGen = this.render(probe, [], { ...options, addGenerationPrompt: true });
      gen = withGen.startsWith(without) ? withGen.slice(without.length) : "";
      this.generationPrompts.set(key, gen);
    }
    return gen;
  }

  private continuation(messages: ChatMessage[], tools: ToolSpec[], options: RenderOptions): string | null {
    const stub: ChatMessage = { role: "assistant", content: "" };
    const key = toolsJson(tools);
    let head = this.stubCache.get(key);
    if (head === undefined) {
      head = this.render([stub], tools, { addGenerationPrompt: false });
      this.remember(this.stubCache, key, head);
    }
    const full = this.render([stub, ...messages], tools, options);
    if (!full.startsWith(head) || !head.endsWith(this.assistantTail)) return null;
    return full.slice(head.length);
  }

  /**
   * `rendered` (rendered without a generation prompt) cut right after the last message's
   * content, so the model continues that message (transformers' `continue_final_message`
   * does the same). Null when the content does not appear verbatim (Qwen3 strips leading
   * newlines from the last assistant turn, so that form is tried too).
   */
  continueFinal(rendered: string, final: ChatMessage): string | null {
    for (const content of [final.content, final.content.replace(/^\n+/, "")]) {
      if (content.length === 0) continue;
      const at = rendered.lastIndexOf(content);
      if (at >= 0) return rendered.slice(0, at + content.length);
    }
    return null;
  }

  private remember<V>(map: Map<string, V>, key: string, value: V): void {
    if (map.size >= 64) map.clear();
    map.set(key, value);
  }
}

/** The message dict HF templates expect (OpenAI chat shape, arguments as objects). */
function templateMessage(m: ChatMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content };
  if (m.reasoning != null) out["reasoning_content"] = m.reasoning;
  if (m.tool_calls && m.tool_calls.length > 0)
    out["tool_calls"] = m.tool_calls.map((c) => ({
      id: c.id,
      type: "function",
      function: { name: c.name, arguments: parseArguments(c.arguments) },
    }));
  if (m.tool_call_id !== undefined) out["tool_call_id"] = m.tool_call_id;
  return out;
}

/** Templates `tojson` the arguments when they are an object; keep text that is not JSON as text. */
function parseArguments(args: string): unknown {
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

function templateTool(t: ToolSpec): Record<string, unknown> {
  const fn: Record<string, unknown> = { name: t.name };
  if (t.description !== undefined) fn["description"] = t.description;
  fn["parameters"] = t.parameters;
  return { type: "function", function: fn };
}
