/**
 * Parsing a completion into reasoning, text and tool calls, whole or as a stream.
 *
 * Two tool-call forms, chosen by config (read the model's chat template first):
 * - `qwen3_json` (Qwen3): `<tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>`
 * - `qwen3_coder_xml` (Qwen3-Coder / Qwen3.5):
 *   `<tool_call>\n<function=N>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>`
 * Reasoning is the `<think>…</think>` block the Qwen3 template opens turns with.
 * A tool call that does not parse stays in the text: the harness sees what the
 * model wrote, and monitoring can count format collapse.
 */
import type { ToolCall, ToolSpec } from "./chat.ts";

export type ToolCallFormat = "qwen3_json" | "qwen3_coder_xml";

export type ParsedToolCall = Omit<ToolCall, "id">;

export type CompletionEvent =
  | { kind: "reasoning"; text: string }
  | { kind: "text"; text: string }
  | { kind: "tool_call"; call: ParsedToolCall };

const THINK_OPEN = "<think>";
const THINK_CLOSE = "</think>";
const CALL_OPEN = "<tool_call>";
const CALL_CLOSE = "</tool_call>";

/** Parses the body between `<tool_call>` and `</tool_call>`; null when it is not a well-formed call. */
export function parseToolCallBody(body: string, format: ToolCallFormat, tools: ToolSpec[]): ParsedToolCall | null {
  return format === "qwen3_json" ? parseJsonCall(body) : parseXmlCall(body, tools);
}

function parseJsonCall(body: string): ParsedToolCall | null {
  let v: unknown;
  try {
    v = JSON.parse(body.trim());
  } catch {
    return null;
  }
  if (!v || typeof v !== "object" || Array.isArray(v)) return null;
  const { name, arguments: args } = v as { name?: unknown; arguments?: unknown };
  if (typeof name !== "string" || name.length === 0) return null;
  if (args === undefined || args === null) return { name, arguments: "{}" };
  if (typeof args === "string") return { name, arguments: args };
  if (typeof args !== "object" || Array.isArray(args)) return null;
  return { name, arguments: JSON.stringify(args) };
}

const FUNCTION_RE = /^\s*<function=([^>\n]+)>([\s\S]*?)<\/function>\s*$/;
const PARAM_RE = /<parameter=([^>\n]+)>([\s\S]*?)<\/parameter>/g;

function parseXmlCall(body: string, tools: ToolSpec[]): ParsedToolCall | null {
  const m = FUNCTION_RE.exec(body);
  if (!m) return null;
  const name = m[1]!.trim();
  const inner = m[2]!;
  const props = schemaProperties(tools.find((t) => t.name === name));
  const args: Record<string, unknown> = {};
  // Anything but whitespace between parameters means the call is malformed.
  if (inner.replace(PARAM_RE, "").trim() !== "") return null;
  for (const p of inner.matchAll(PARAM_RE)) {
    const key = p[1]!.trim();
    // The template writes "\n" around each value; strip exactly one on each side.
    const raw = p[2]!.replace(/^\n/, "").replace(/\n$/, "");
    args[key] = xmlValue(raw, props[key]);
  }
  return { name, arguments: JSON.stringify(args) };
}

function schemaProperties(tool: ToolSpec | undefined): Record<string, { type?: unknown }> {
  const p = tool?.parameters["properties"];
  return p && typeof p === "object" ? (p as Record<string, { type?: unknown }>) : {};
}

/** String parameters are raw text; any other declared type is JSON, falling back to the raw text. */
function xmlValue(raw: string, schema: { type?: unknown } | undefined): unknown {
  const type = schema?.type;
  if (type === "string" || (schema !== undefined && type === undefined)) return raw;
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

/**
 * Incremental parser: push decoded text as it streams, get events as soon as
 * they are certain. Text that might be the start of a tag is held back.
 *
 * A call ends at the `</tool_call>` that closes it, not at the first one in the
 * text: in `qwen3_json` a `</tool_call>` inside a JSON string (a file the model
 * writes) is part of the arguments, so the body is scanned as JSON; in
 * `qwen3_coder_xml` the closing tag must follow `</function>`. A block that does
 * not parse reaches the harness verbatim, with the whitespace around it.
 */
export class CompletionParser {
  private buf = "";
  private state: "start" | "reasoning" | "text" | "call" = "start";
  /** Separator the template writes at the start of the current state, dropped once it has arrived. */
  private leading: RegExp | null = null;
  /** Whitespace dropped after the last parsed call; given back if a malformed block follows. */
  private dropped = "";
  /** Whitespace between the text and the open call, given back if the call does not parse. */
  private sepBefore = "";
  /** The text state was entered after a parsed call: the whitespace it drops goes to `dropped`. */
  private afterCall = false;
  /** Where the JSON scan of the open call stands (qwen3_json). */
  private readonly scan = new JsonScan();
  /** `<tool_call>` blocks that did not parse (or never closed) and went to the harness as text: format collapse, counted per rollout. */
  malformedCalls = 0;

  constructor(
    private readonly format: ToolCallFormat,
    private readonly tools: ToolSpec[],
    /** When false (tool_choice "none" or no tools), `<tool_call>` is plain text. */
    private readonly parseCalls = true,
    /** The completion continues text already written (an assistant prefill): no reasoning block opens it. */
    startInText = false,
  ) {
    if (startInText) this.state = "text";
  }

  push(text: string): CompletionEvent[] {
    this.buf += text;
    return this.drain(false);
  }

  /** Flushes everything held back; call once after the last token. */
  finish(): CompletionEvent[] {
    return this.drain(true);
  }

  private enter(state: "reasoning" | "text" | "call", rest: string, leading: RegExp | null): void {
    this.state = state;
    this.buf = rest;
    this.leading = leading;
  }

  private drain(final: boolean): CompletionEvent[] {
    const out: CompletionEvent[] = [];
    const emit = (kind: "reasoning" | "text", text: string) => {
      if (text.length === 0) return;
      const last = out[out.length - 1];
      if (last && last.kind === kind) last.text += text;
      else out.push({ kind, text });
    };
    for (;;) {
      if (this.leading) {
        // Wait until the separator can no longer grow (a non-whitespace char arrived) before dropping it.
        if (!final && /^\s*$/.test(this.buf)) return out;
        const m = this.leading.exec(this.buf);
        const cut = m ? m[0].length : 0;
        this.dropped = this.afterCall ? this.buf.slice(0, cut) : "";
        this.afterCall = false;
        this.buf = this.buf.slice(cut);
        this.leading = null;
      }
      if (this.state === "start") {
        // Reasoning only counts at the very start of a turn (leading whitespace allowed).
        const trimmed = this.buf.trimStart();
        if (trimmed.startsWith(THINK_OPEN)) {
          this.enter("reasoning", trimmed.slice(THINK_OPEN.length), /^\n/);
          continue;
        }
        if (!final && (trimmed.length === 0 || THINK_OPEN.startsWith(trimmed))) return out;
        this.state = "text";
        continue;
      }
      if (this.state === "reasoning") {
        const end = this.buf.indexOf(THINK_CLOSE);
        if (end < 0) {
          const keep = final ? 0 : heldBack(this.buf, THINK_CLOSE);
          emit("reasoning", this.buf.slice(0, this.buf.length - keep));
          this.buf = this.buf.slice(this.buf.length - keep);
          return out;
        }
        emit("reasoning", this.buf.slice(0, end).replace(/\n$/, ""));
        // The template writes "</think>\n\n" before the answer.
        this.enter("text", this.buf.slice(end + THINK_CLOSE.length), /^\n\n?/);
        continue;
      }
      if (this.state === "text") {
        const start = this.parseCalls ? this.buf.indexOf(CALL_OPEN) : -1;
        if (start < 0) {
          const keep = final || !this.parseCalls ? 0 : heldBack(this.buf, CALL_OPEN);
          const text = this.buf.slice(0, this.buf.length - keep);
          if (text.length > 0) this.dropped = "";
          emit("text", text);
          this.buf = this.buf.slice(this.buf.length - keep);
          return out;
        }
        // The template puts "\n" between text and the first call; it is not part of the text.
        const before = this.buf.slice(0, start);
        const sep = before.endsWith("\n") ? "\n" : "";
        emit("text", before.slice(0, before.length - sep.length));
        this.sepBefore = before.length === 0 ? this.dropped : sep;
        this.dropped = "";
        this.scan.reset();
        this.enter("call", this.buf.slice(start), null);
        continue;
      }
      // state "call": buf starts with <tool_call>
      const end = this.callEnd(final);
      if (end < 0) {
        if (!final) return out;
        this.malformedCalls += 1;
        emit("text", this.sepBefore + this.buf);
        this.buf = "";
        return out;
      }
      const body = this.buf.slice(CALL_OPEN.length, end);
      const call = parseToolCallBody(body, this.format, this.tools);
      const rest = this.buf.slice(end + CALL_CLOSE.length);
      if (call) {
        out.push({ kind: "tool_call", call });
        // Calls are separated by "\n"; whitespace after the last one is template padding.
        this.afterCall = true;
        this.enter("text", rest, /^\s+/);
      } else {
        this.malformedCalls += 1;
        emit("text", this.sepBefore + this.buf.slice(0, end + CALL_CLOSE.length));
        this.enter("text", rest, null);
      }
      this.sepBefore = "";
    }
  }

  /**
   * Index of the `</tool_call>` that closes the open call, or -1 while it is not
   * known yet (final: none will come, and the block is unterminated).
   */
  private callEnd(final: boolean): number {
    const buf = this.buf;
    if (this.format === "qwen3_coder_xml") {
      for (let at = buf.indexOf(CALL_CLOSE); at >= 0; at = buf.indexOf(CALL_CLOSE, at + 1))
        if (/<\/function>\s*$/.test(buf.slice(0, at))) return at;
      return final ? buf.indexOf(CALL_CLOSE) : -1;
    }
    const r = this.scan.advance(buf, CALL_OPEN.length);
    if (r === "close") return this.scan.pos;
    if (r === "object") {
      // The JSON object is complete: only whitespace may come before the closing tag.
      let i = this.scan.pos;
      while (i < buf.length && /\s/.test(buf[i]!)) i++;
      if (buf.startsWith(CALL_CLOSE, i)) return i;
      if (!final && CALL_CLOSE.startsWith(buf.slice(i))) return -1;
      return buf.indexOf(CALL_CLOSE, i); // junk after the object: a malformed block up to the next tag
    }
    // "not_json" (the body does not open with an object) or a scan still running.
    if (r === "not_json") return final || buf.includes(CALL_CLOSE) ? buf.indexOf(CALL_CLOSE) : -1;
    return final ? buf.indexOf(CALL_CLOSE) : -1;
  }
}

/**
 * A resumable scan of `<tool_call>`'s body as JSON: it finds where the object
 * that opens the body ends, skipping braces and `</tool_call>` inside strings,
 * and stops early at a `</tool_call>` outside any string (an unbalanced body).
 * It resumes where the last call stopped, so streaming a long call costs one
 * pass over its text.
 */
class JsonScan {
  pos = 0;
  private depth = 0;
  private inString = false;
  private escaped = false;
  private started = false;
  private complete = false;

  reset(): void {
    this.pos = 0;
    this.depth = 0;
    this.inString = false;
    this.escaped = false;
    this.started = false;
    this.complete = false;
  }

  /** Scans `buf` from where it stopped (at least `from`); "more": the text so far settles nothing. */
  advance(buf: string, from: number): "object" | "close" | "not_json" | "more" {
    if (this.complete) return "object";
    let i = Math.max(this.pos, from);
    if (!this.started) {
      while (i < buf.length && /\s/.test(buf[i]!)) i++;
      this.pos = i;
      if (i === buf.length) return "more";
      if (buf[i] !== "{") return "not_json";
      this.started = true;
    }
    for (; i < buf.length; i++) {
      const c = buf.charCodeAt(i);
      if (this.inString) {
        if (this.escaped) this.escaped = false;
        else if (c === 92 /* \\ */) this.escaped = true;
        else if (c === 34 /* " */) this.inString = false;
        continue;
      }
      if (c === 34) this.inString = true;
      else if (c === 123 /* { */) this.depth++;
      else if (c === 125 /* } */) {
        if (--this.depth === 0) {
          this.pos = i + 1;
          this.complete = true;
          return "object";
        }
      } else if (c === 60 /* < */) {
        if (buf.startsWith(CALL_CLOSE, i)) {
          this.pos = i;
          return "close";
        }
        // A tag cut at the end of what has arrived: look at it again with more text.
        if (CALL_CLOSE.startsWith(buf.slice(i))) break;
      }
    }
    this.pos = i;
    return "more";
  }
}

/**
 * How many trailing chars of `s` to hold back: a proper prefix of `tag`, plus
 * one "\n" before it (the template's separator, dropped if the tag follows).
 */
function heldBack(s: string, tag: string): number {
  let n = 0;
  for (let k = Math.min(tag.length - 1, s.length); k > 0; k--)
    if (s.endsWith(tag.slice(0, k))) {
      n = k;
      break;
    }
  if (s.charCodeAt(s.length - n - 1) === 10) n++;
  return n;
}

/** Parses a whole completion text. */
export function parseCompletion(text: string, format: ToolCallFormat, tools: ToolSpec[], parseCalls = true) {
  const p = new CompletionParser(format, tools, parseCalls);
  const events = [...p.push(text), ...p.finish()];
  let reasoning: string | null = null;
  let content = "";
  const calls: ParsedToolCall[] = [];
  for (const e of events) {
    if (e.kind === "reasoning") reasoning = (reasoning ?? "") + e.text;
    else if (e.kind === "text") content += e.text;
    else calls.push(e.call);
  }
  return { reasoning, content, calls };
}
