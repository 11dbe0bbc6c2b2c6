/**
 * What a harness reported about its own run, beside what the proxy recorded:
 * its exit, its final message, the tool calls its own record (event stream or
 * trajectory file) says it executed, its stderr tail. The sandbox reads the
 * record back from the container (AgentRunRecord); the agent controls that
 * container, so every byte is hostile: the text is already bounded, it is
 * parsed with JSON.parse line by line (linear, no backtracking regex), every
 * field is type-checked, and whatever does not parse becomes a note, never an
 * exception out of the rollout.
 */
import type { ProxyModel, SessionRecords } from "../proxy/index.ts";
import { parseCompletion } from "../proxy/index.ts";
import type { AgentRunRecord, RecordFileSpec } from "../sandbox/index.ts";

/** A tool call: its name and its arguments as a JSON object. */
export interface ToolCallRecord {
  name: string;
  arguments: Record<string, unknown>;
}

/** A tool call the harness's own record says it executed. */
export interface HarnessToolCall extends ToolCallRecord {
  /** Whether the record says it succeeded; null where the record does not say. */
  ok: boolean | null;
}

/** What a harness's own record says, parsed. */
export interface OwnRecord {
  toolCalls: HarnessToolCall[];
  finalMessage: string | null;
  /** Why the record is partial or missing (a truncated file, lines that are not JSON). */
  notes: string[];
}

/** How one harness's own record is found and read. */
export interface HarnessRecordReader {
  /** Where the harness writes it in the agent container, and how much of it is read back. */
  file: RecordFileSpec;
  /** Parses the record (and, for a driver that prints its status, the program's stdout). May throw on garbage: readOwnRecord turns that into a note. */
  parse(text: string, run: AgentRunRecord): OwnRecord;
  /**
   * A call as the model made it (what the proxy parsed from the engine's
   * tokens), in the form the record shows an executed call: the harness's
   * names for its tools, arguments as it records them. Identity when absent.
   */
  asExecuted?(call: ToolCallRecord): ToolCallRecord;
}

export type HarnessReport = {
  harness: string;
  /** The program's exit code; null when the agent stage never ran it to an end (an environment failure). */
  exitCode: number | null;
  timedOut: boolean;
  finalMessage: string | null;
  /** What the harness's own record says it executed, in order. */
  toolCalls: HarnessToolCall[];
  stderrTail: string;
  /** Why part of the report is missing or partial; empty when the record was read whole. */
  notes: string[];
  /** The calls the model made (proxy, main thread) that the record does not show executed as made, one line each; empty when they agree. */
  toolCallMismatches: string[];
  /** From the proxy: model calls, segments, side threads. */
  turns: number;
  segments: number;
  side_threads: number;
};

/** Record files are read up to this size: a 30-turn run's stream with whole files in its tool results stays well under it. */
export const RECORD_MAX_BYTES = 8 << 20;

/** The harness's own record as an OwnRecord, whatever the container left there. */
export function readOwnRecord(reader: HarnessRecordReader, run: AgentRunRecord | undefined): OwnRecord {
  const empty = (note: string): OwnRecord => ({ toolCalls: [], finalMessage: null, notes: [note] });
  if (!run) return empty("the agent stage did not run the harness to an end: no record to read");
  const file = run.files.find((f) => f.path === reader.file.path);
  if (!file) return empty(`${reader.file.path}: not read back by the sandbox`);
  if (file.status !== "read") return empty(`${file.path}: ${file.status} (${file.detail})`);
  const notes = file.truncated ? [`${file.path}: ${file.bytes} bytes, only the first ${reader.file.maxBytes} read`] : [];
  try {
    const own = reader.parse(file.text, run);
    return { ...own, notes: [...notes, ...own.notes] };
  } catch (e) {
    // The parser is ours and the text is not: whatever it throws on (a shape it
    // did not expect, a nesting too deep) is garbage in the record, said as such.
    return { toolCalls: [], finalMessage: null, notes: [...notes, `${file.path}: not readable as this harness's record (${e instanceof Error ? `${e.name}: ${e.message}` : String(e)})`] };
  }
}

/** The tool calls the model made on the main thread, parsed from the recorded completion tokens as the proxy parses them. */
export function proxyToolCalls(records: SessionRecords, model: ProxyModel): ToolCallRecord[] {
  const turns = new Map(records.turns.map((t) => [t.turn_id, t]));
  const calls: ToolCallRecord[] = [];
  for (const seg of records.segments.filter((s) => s.thread === "main")) {
    for (const span of seg.turns) {
      const turn = turns.get(span.turn_id);
      if (!turn) continue;
      const text = model.tokenizer.decode(Array.from(turn.completion_ids));
      for (const c of parseCompletion(text, model.toolCallFormat, []).calls) calls.push({ name: c.name, arguments: jsonArguments(c.arguments) });
    }
  }
  return calls;
}

/** Per call, how what the model made differs from what the record shows executed; empty when they agree call for call. */
export function toolCallMismatches(made: ToolCallRecord[], executed: ToolCallRecord[], reader: HarnessRecordReader): string[] {
  const expected = made.map((c) => reader.asExecuted?.(c) ?? c);
  const out: string[] = [];
  if (expected.length !== executed.length) out.push(`the model made ${expected.length} tool call(s), the harness's record shows ${executed.length} executed`);
  for (let i = 0; i < Math.min(expected.length, executed.length); i++) {
    const [e, x] = [expected[i]!, executed[i]!];
    if (e.name !== x.name) out.push(`call ${i}: the model called ${e.name}, the record shows ${x.name}`);
    else if (canonicalJson(e.arguments) !== canonicalJson(x.arguments))
      out.push(`call ${i} (${e.name}): arguments ${clip(canonicalJson(e.arguments))} made, ${clip(canonicalJson(x.arguments))} executed`);
  }
  return out;
}

const clip = (s: string) => (s.length > 300 ? `${s.slice(0, 300)}…` : s);

/** JSON with object keys sorted, so equal values compare equal as text; nesting past 64 levels is refused (hostile input). */
export function canonicalJson(v: unknown, depth = 0): string {
  if (depth > 64) throw new RangeError("value nested more than 64 levels");
  if (Array.isArray(v)) return `[${v.map((x) => canonicalJson(x, depth + 1)).join(",")}]`;
  if (v && typeof v === "object")
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k], depth + 1)}`).join(",")}}`;
  return JSON.stringify(v) ?? "null";
}

/** Arguments text as an object; text that is not a JSON object is kept whole under `$raw`, so a mismatch shows it. */
export function jsonArguments(text: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(text);
    if (isObject(v)) return v;
  } catch {
    // not JSON: kept as text below
  }
  return { $raw: text };
}

// ── helpers for the per-harness parsers ─────────────────────────────────────

export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
export const str = (v: unknown): string | null => (typeof v === "string" ? v : null);
export const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);

/** The JSON objects of a JSON-lines text; lines that are not JSON objects are counted into one note (a truncated last line among them). */
export function jsonLines(text: string, notes: string[]): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  const bad: number[] = [];
  const lines = text.split("\n");
  lines.forEach((line, i) => {
    if (!line.trim()) return;
    try {
      const v: unknown = JSON.parse(line);
      if (isObject(v)) out.push(v);
      else bad.push(i + 1);
    } catch {
      bad.push(i + 1);
    }
  });
  if (bad.length) notes.push(`${bad.length} of ${lines.length} line(s) are not JSON objects (first: line ${bad[0]}), skipped`);
  return out;
}

/** The program's run as a HarnessReport's own part: exit, tails and the record, read. */
export function harnessReport(
  harness: string, reader: HarnessRecordReader, run: AgentRunRecord | undefined, madeCalls: ToolCallRecord[],
  proxy: { turns: number; segments: number; side_threads: number },
): HarnessReport {
  const own = readOwnRecord(reader, run);
  let mismatches: string[];
  try {
    mismatches = toolCallMismatches(madeCalls, own.toolCalls, reader);
  } catch (e) {
    // canonicalJson refuses arguments nested past its bound: a record shaped to exhaust the stack.
    if (!(e instanceof RangeError)) throw e;
    mismatches = [`the calls could not be compared (${e.message})`];
  }
  return {
    harness,
    exitCode: run ? run.exitCode : null,
    timedOut: run?.timedOut ?? false,
    finalMessage: own.finalMessage,
    toolCalls: own.toolCalls,
    stderrTail: run?.stderrTail ?? "",
    notes: own.notes,
    toolCallMismatches: mismatches,
    ...proxy,
  };
}
