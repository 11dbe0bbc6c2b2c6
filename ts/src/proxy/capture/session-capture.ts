/**
 * Everything one rollout session recorded: its turns, the segments they
 * merge into, and the audit list of turns that never train (rolled back by a
 * retry, aborted by a client disconnect, failed in the engine).
 *
 * Threads: calls are grouped by their system prompt, so a sub-agent, OpenCode's
 * title generation or a condenser (each with a system prompt of its own) gets a
 * thread of its own, while a call that changes the tool list stays in its thread
 * (its segment is sealed when the prompt it renders really changed: ThreadCapture).
 * At close the first thread that offered tools (else the first thread) is the
 * harness's `main` thread; every other one is a flagged `side` thread.
 */
import type { ChatMessage, ChatRequest } from "../chat.ts";
import type { Segment, Turn } from "../records.ts";
import type { ParsedToolCall } from "../tool-calls.ts";
import { ThreadCapture, type PromptCodec, type PromptPlan } from "./thread-capture.ts";

/** `rejected`: the engine refused the request for a value the harness chose (answered with a 400). */
export type AuditReason = "rolled_back" | "aborted" | "error" | "rejected";

export interface AuditEntry {
  reason: AuditReason;
  turn: Turn;
}

/** Called after every turn ends (live monitoring; tests use it to wait without sleeping). */
export type TurnListener = (event: { session_id: string; turn: Turn; outcome: "committed" | AuditReason }) => void;

/**
 * How much of a segment's routing the engine recorded. The trainer replays routing for
 * every token it feeds: all but the segment's last (whose output predicts nothing).
 */
export interface RoutingCoverage {
  segment_id: string;
  thread_id: string;
  /** Tokens that need a routing row: the segment's length - 1. */
  rows_needed: number;
  /** Of those, rows holding the engine's choice (`routing_recorded` 1). */
  rows_recorded: number;
  /** rows_recorded / rows_needed (1 for a one-token segment); null for a dense model (no routing). */
  coverage: number | null;
}

export interface SessionRecords {
  session_id: string;
  /** Turns merged into segments, in call order. */
  turns: Turn[];
  /** Main thread first. */
  segments: Segment[];
  audit: AuditEntry[];
  /** Ids of side threads (flagged: calls off the main thread). */
  side_thread_ids: string[];
  /** Per segment, in `segments` order. */
  routing_coverage: RoutingCoverage[];
  /**
   * The tool calls of the main thread's committed turns, in call order, as the
   * proxy parsed them from the policy's tokens (rolled-back turns' calls are not
   * here; calls that did not parse are counted, not listed). Kept whole rather
   * than counted here so that what a call means stays the harness's business:
   * the proxy knows no harness's tool vocabulary (harness/file-touches.ts reads
   * these for re-reads after edits).
   */
  main_tool_calls: ParsedToolCall[];
  /** Inputs to TrajectoryMetrics (records.toml) that only the proxy sees. */
  counters: { main_turns: number; side_thread_turns: number; tool_calls: number; tool_call_parse_failures: number; rolled_back_turns: number };
}

export class SessionCapture {
  private readonly threads = new Map<string, ThreadCapture>();
  private readonly turns: Turn[] = [];
  private readonly audit: AuditEntry[] = [];
  private turnSeq = 0;
  /** Tool calls per committed turn id (a rolled-back turn's calls are dropped with it). */
  private readonly toolCalls = new Map<string, ParsedToolCall[]>();
  /** Tool-call blocks that did not parse, per committed turn id (likewise). */
  private readonly parseFailures = new Map<string, number>();
  private segmentSeq = 0;
  private closed: SessionRecords | null = null;

  constructor(
    readonly sessionId: string,
    private readonly codec: PromptCodec,
    private readonly listener: TurnListener | null = null,
  ) {}

  /** Picks the thread of `req` and plans its prompt; `window`: the engine's context window (ThreadCapture.plan). */
  plan(req: ChatRequest, window: number | null = null): { thread: ThreadCapture; plan: PromptPlan } {
    const key = threadKey(req);
    let thread = this.threads.get(key);
    if (!thread) {
      thread = new ThreadCapture(key, this.threads.size, () => `${this.sessionId}/seg-${this.segmentSeq++}`);
      this.threads.set(key, thread);
    }
    return { thread, plan: thread.plan(req, this.codec, window) };
  }

  nextTurnId(): string {
    return `${this.sessionId}/turn-${this.turnSeq++}`;
  }

  /** Provisional thread id until close decides which thread is main. */
  threadId(thread: ThreadCapture): string {
    return `thread-${thread.index}`;
  }

  /**
   * `routingRecorded`: per completion token, 0 where the engine reported no routing (see GenerateChunk).
   * `parseFailures`: tool-call blocks of the completion that did not parse (CompletionParser.malformedCalls).
   */
  commit(thread: ThreadCapture, plan: PromptPlan, turn: Turn, reply: ChatMessage, routingRecorded: Uint8Array | null = null, parseFailures = 0): void {
    if (this.closed) return;
    const { rolledBack } = thread.commit(plan, turn, reply, this.codec, routingRecorded);
    this.turns.push(turn);
    this.toolCalls.set(turn.turn_id, (reply.tool_calls ?? []).map(({ name, arguments: args }) => ({ name, arguments: args })));
    this.parseFailures.set(turn.turn_id, parseFailures);
    if (rolledBack) {
      this.turns.splice(this.turns.indexOf(rolledBack), 1);
      this.toolCalls.delete(rolledBack.turn_id);
      this.parseFailures.delete(rolledBack.turn_id);
      this.audit.push({ reason: "rolled_back", turn: rolledBack });
      this.listener?.({ session_id: this.sessionId, turn: rolledBack, outcome: "rolled_back" });
    }
    this.listener?.({ session_id: this.sessionId, turn, outcome: "committed" });
  }

  /** A turn that produced no usable completion (client gone, engine failed). */
  recordFailed(turn: Turn, reason: "aborted" | "error" | "rejected"): void {
    if (this.closed) return;
    this.audit.push({ reason, turn });
    this.listener?.({ session_id: this.sessionId, turn, outcome: reason });
  }

  /** Seals every open segment and returns the session's records; later calls return the same records. */
  close(reason: "finished" | "aborted" = "finished"): SessionRecords {
    if (this.closed) return this.closed;
    const threads = [...this.threads.values()];
    const main = threads.find((t) => t.hasTools && t.turnCount > 0) ?? threads.find((t) => t.turnCount > 0);
    const label = (t: ThreadCapture) => (t === main ? "main" : `side-${t.index}`);
    const relabel = new Map(threads.map((t) => [this.threadId(t), label(t)]));
    const segments: Segment[] = [];
    for (const t of main ? [main, ...threads.filter((x) => x !== main)] : threads) {
      t.close(reason);
      for (const d of t.sealed) segments.push(d.builder.seal(d.reason, t === main ? "main" : "side", label(t)));
    }
    const fix = (turn: Turn): Turn => ({ ...turn, thread_id: relabel.get(turn.thread_id) ?? turn.thread_id });
    const turns = this.turns.map(fix);
    const mainTurns = turns.filter((t) => t.thread_id === "main").length;
    const mainToolCalls: ParsedToolCall[] = [];
    let parseFailures = 0;
    for (const t of turns) {
      if (t.thread_id !== "main") continue;
      mainToolCalls.push(...(this.toolCalls.get(t.turn_id) ?? []));
      parseFailures += this.parseFailures.get(t.turn_id) ?? 0;
    }
    this.closed = {
      session_id: this.sessionId,
      turns,
      segments,
      audit: this.audit.map((a) => ({ reason: a.reason, turn: fix(a.turn) })),
      side_thread_ids: threads.filter((t) => t !== main && t.turnCount > 0).map(label),
      routing_coverage: segments.map(routingCoverage),
      main_tool_calls: mainToolCalls,
      counters: {
        main_turns: mainTurns,
        side_thread_turns: turns.length - mainTurns,
        tool_calls: mainToolCalls.length,
        tool_call_parse_failures: parseFailures,
        rolled_back_turns: this.audit.filter((a) => a.reason === "rolled_back").length,
      },
    };
    return this.closed;
  }
}

function routingCoverage(s: Segment): RoutingCoverage {
  const needed = Math.max(0, s.token_ids.length - 1);
  let recorded = 0;
  const flags = s.routing_recorded;
  if (flags) for (let i = 0; i < needed; i++) recorded += flags[i]!;
  const coverage = flags === null ? null : needed === 0 ? 1 : recorded / needed;
  return { segment_id: s.segment_id, thread_id: s.thread_id, rows_needed: needed, rows_recorded: recorded, coverage };
}

/** The system prompt: what tells one conversation of a harness from another (not its tools, which change: Claude Code's ToolSearch). */
function threadKey(req: ChatRequest): string {
  const first = req.messages[0];
  return first && first.role === "system" ? first.content : "";
}
