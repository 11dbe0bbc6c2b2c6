/**
 * One conversation thread's token history: which prompt the next call gets,
 * and how its turn joins the open segment.
 *
 * Token-in-token-out: when the incoming
 * messages are the recorded prompt messages + the recorded assistant reply +
 * new messages, the next prompt is the segment so far (recorded prompt ids +
 * the completion ids the engine produced) + the template's end-of-turn tail +
 * the rendering of only the new messages. Text the policy generated is never
 * tokenized again. Otherwise:
 * - the same messages as the last prompt: a retry; the last turn rolls back to the audit list;
 * - a last assistant message to continue (Anthropic prefill): the prompt ends with its
 *   text, and the harness's next call echoes it joined with the reply;
 * - anything else (compaction, edited or injected history, a changed tool list in
 *   the prompt): the history was rewritten; the segment is sealed and a new one starts
 *   from a full render. The thread stays the same (SessionCapture picks threads).
 */
import type { ChatMessage, ChatRequest } from "../chat.ts";
import { toolsJson, type ChatTemplate } from "../chat-template.ts";
import { InvalidRequestError } from "../errors.ts";
import { TokenProvenance, type Turn } from "../records.ts";
import type { TextTokenizer } from "../tokenizer.ts";
import { assistantFingerprint } from "./fingerprint.ts";
import { Growable } from "../growable.ts";
import { checkFits, probeFits } from "./prompt-budget.ts";
import { SegmentBuilder } from "./segment-builder.ts";

export interface PromptCodec {
  template: ChatTemplate;
  tokenizer: TextTokenizer;
  /** The token that ends an assistant turn (Qwen3 <|im_end|>). */
  endOfTurnId: number;
  endOfTurnText: string;
}

type Supplied = typeof TokenProvenance.prompt | typeof TokenProvenance.template;

export interface PromptPiece {
  ids: Int32Array;
  provenance: Supplied;
}

export interface PromptPlan {
  kind: "fresh" | "extend" | "retry";
  /**
   * Ids sent to the engine: a view of the thread's prompt buffer, which the next
   * call reuses once this one has committed (the segment then holds the same ids).
   */
  prompt_ids: Int32Array;
  /** The whole buffer `prompt_ids` views. */
  promptBuffer: Int32Array;
  /** Segment tokens kept before `pieces` (extend: all; retry: up to the last prompt). */
  baseLength: number;
  /** Views of `prompt_ids` (the pieces own no copy: a call's tokenizer output dies young). */
  pieces: PromptPiece[];
  version: number;
  messages: ChatMessage[];
  toolsKey: string;
  /** Why a fresh plan was needed while a segment was open; null for the first call. */
  rewritten: boolean;
  /** The last message is a prefill the completion continues. */
  prefill: boolean;
}

interface ThreadState {
  /** The last prompt's messages, as sent (a retry sends them again). */
  messages: ChatMessage[];
  /** The messages a next call continues from: `messages` less a final prefill. */
  history: ChatMessage[];
  /** The assistant turn the next call echoes after `history` (a prefill joined with its continuation). */
  reply: ChatMessage;
  lastPromptLength: number;
  endsWithEndOfTurn: boolean;
  toolsKey: string;
  lastTurn: Turn;
}

export interface SealedDraft {
  builder: SegmentBuilder;
  reason: "finished" | "history_rewritten" | "aborted";
}

export class ThreadCapture {
  private builder: SegmentBuilder | null = null;
  private state: ThreadState | null = null;
  /** A committed call's prompt buffer, free for the next plan. */
  private spare: Int32Array | null = null;
  private version = 0;
  readonly sealed: SealedDraft[] = [];
  turnCount = 0;

  constructor(
    readonly key: string,
    readonly index: number,
    private readonly newSegmentId: () => string,
  ) {}

  /** Some call of this thread offered tools (the harness's own conversation does). */
  hasTools = false;

  /**
   * Plans the next prompt. `window` is the engine's context window (null: unknown): a
   * prompt that does not leave room for one sampled token is refused here, and text far
   * longer than the room left is refused from a prefix before all of it is tokenized.
   */
  plan(req: ChatRequest, codec: PromptCodec, window: number | null = null): PromptPlan {
    if (req.tools.length > 0 || (req.deferred_tools?.length ?? 0) > 0) this.hasTools = true;
    // The tools as the prompt shows them: deferred tools are not in it, so declaring one
    // (Claude Code's ToolSearch) changes nothing the model saw; any other change does.
    const toolsKey = toolsJson(req.tools);
    const base = { version: this.version, messages: req.messages, toolsKey, prefill: req.continue_final_message === true };
    const st = this.state;
    const b = this.builder;
    if (st && b && st.toolsKey === toolsKey) {
      const m = req.messages;
      // Equal messages keep the recorded objects (already long-lived), so this request's
      // copies of the whole history die young.
      const k = st.messages.length;
      if (m.length === k && sameMessages(m, st.messages, k)) {
        const promptBuffer = this.promptBufferFor(st.lastPromptLength);
        const prompt_ids = promptBuffer.subarray(0, st.lastPromptLength);
        prompt_ids.set(b.tokens.view(0, st.lastPromptLength));
        return { ...base, messages: st.messages, kind: "retry", prompt_ids, promptBuffer, baseLength: st.lastPromptLength, pieces: [], rewritten: false };
      }
      const h = st.history.length;
      if (m.length > h && sameMessages(m, st.history, h) && sameMessage(m[h]!, st.reply) && this.extension(st, m.slice(h + 1), req, codec, window, b.length)) {
        checkFits(b.length + NEW_PIECES.ids.length, window);
        return { ...base, ...this.assemble(b.tokens.view()), messages: st.history.concat(m.slice(h)), kind: "extend", baseLength: b.length, rewritten: false };
      }
    }
    NEW_PIECES.reset();
    let text = codec.template.render(req.messages, req.tools, renderOptions(req));
    if (req.continue_final_message) text = continueFinal(codec, text, req);
    appendRendered(text, req, codec, window, 0, true);
    checkFits(NEW_PIECES.ids.length, window);
    return { ...base, ...this.assemble(EMPTY), kind: "fresh", baseLength: 0, rewritten: b !== null && b.turnCount > 0 };
  }

  /**
   * Appends to NEW_PIECES the tail after the last completion + the new messages;
   * false when the template cannot render them alone.
   */
  private extension(st: ThreadState, fresh: ChatMessage[], req: ChatRequest, codec: PromptCodec, window: number | null, kept: number): boolean {
    const tail = codec.template.assistantTail;
    let tailText: string;
    if (st.endsWithEndOfTurn) {
      if (!tail.startsWith(codec.endOfTurnText)) return false;
      tailText = tail.slice(codec.endOfTurnText.length);
    } else tailText = tail;
    let cont = codec.template.renderContinuation(fresh, req.tools, renderOptions(req));
    if (cont === null) return false;
    if (req.continue_final_message) cont = continueFinal(codec, cont, req);
    NEW_PIECES.reset();
    codec.tokenizer.encodeInto(tailText, NEW_PIECES.ids);
    NEW_PIECES.end(TokenProvenance.template);
    appendRendered(cont, req, codec, window, kept);
    return true;
  }

  /** The prompt `kept` + NEW_PIECES in this thread's prompt buffer, and the pieces as views of it. */
  private assemble(kept: Int32Array): { prompt_ids: Int32Array; promptBuffer: Int32Array; pieces: PromptPiece[] } {
    const fresh = NEW_PIECES.ids;
    const n = kept.length + fresh.length;
    const promptBuffer = this.promptBufferFor(n);
    const prompt_ids = promptBuffer.subarray(0, n);
    prompt_ids.set(kept, 0);
    prompt_ids.set(fresh.view(), kept.length);
    const pieces: PromptPiece[] = [];
    let from = kept.length;
    for (let i = 0; i < NEW_PIECES.ends.length; i++) {
      const to = kept.length + NEW_PIECES.ends[i]!;
      pieces.push({ ids: prompt_ids.subarray(from, to), provenance: NEW_PIECES.provenances[i]! });
      from = to;
    }
    return { prompt_ids, promptBuffer, pieces };
  }

  /**
   * A buffer for an `n`-token prompt: the one the last committed call used when it
   * is big enough, else a new one with room to grow. A thread's prompts are about as
   * long as its segment, so a new buffer per call was most of the proxy's off-heap
   * allocation, and V8 starts full collections on off-heap growth alone.
   */
  private promptBufferFor(n: number): Int32Array {
    const spare = this.spare;
    if (spare && spare.length >= n) {
      this.spare = null;
      return spare;
    }
    let size = 4096;
    while (size < n) size *= 2;
    return new Int32Array(size);
  }

  /**
   * Hands a committed plan's buffer back for the next call. Only after commit: the turn
   * and the segment then hold their own ids, and the engine has finished reading the
   * prompt (EngineClient: a request's prompt_ids are read before its stream ends). A
   * failed turn keeps its prompt in the audit list, so its buffer is never reused.
   */
  private release(plan: PromptPlan): void {
    if (!this.spare || this.spare.length < plan.promptBuffer.length) this.spare = plan.promptBuffer;
  }

  /**
   * Records a finished turn. Returns the turn a retry replaced (for the audit
   * list). A plan made before another call on this thread committed is stale:
   * its turn gets a segment of its own whose prompt is untrainable history.
   */
  commit(plan: PromptPlan, turn: Turn, reply: ChatMessage, codec: PromptCodec, routingRecorded: Uint8Array | null = null): { rolledBack: Turn | null } {
    this.turnCount++;
    if (plan.version !== this.version) {
      const own = new SegmentBuilder(this.newSegmentId());
      own.appendSupplied(plan.prompt_ids, TokenProvenance.prompt, turn.prompt_routing);
      own.appendSampled(turn, turn.completion_ids, turn.logprobs, turn.routing, routingRecorded);
      turn.prompt_ids = own.tokens.view(0, plan.prompt_ids.length);
      this.sealed.push({ builder: own, reason: "finished" });
      this.release(plan);
      return { rolledBack: null };
    }
    this.version++;
    let rolledBack: Turn | null = null;
    if (plan.kind === "fresh") {
      if (this.builder && this.builder.turnCount > 0)
        this.sealed.push({ builder: this.builder, reason: "history_rewritten" });
      this.builder = new SegmentBuilder(this.newSegmentId());
    } else if (plan.kind === "retry") {
      this.builder!.rollBackLastTurn();
      rolledBack = this.state!.lastTurn;
    }
    const b = this.builder!;
    b.truncate(plan.baseLength);
    // The kept tokens went through this call's prefill too: it routed the last token of each
    // earlier turn, which no earlier call fed to the model.
    if (turn.prompt_routing && plan.baseLength > 0) b.fillFromPrefill(turn.prompt_routing, turn.prompt_ids.length, plan.baseLength, turn.policy_version);
    let offset = plan.baseLength;
    for (const p of plan.pieces) {
      b.appendSupplied(p.ids, p.provenance, promptRouting(turn, offset, p.ids.length));
      offset += p.ids.length;
    }
    b.appendSampled(turn, turn.completion_ids, turn.logprobs, turn.routing, routingRecorded);
    // The segment now holds this prompt at [0, prompt length): the turn keeps a view of it
    // instead of its own copy (a session's turns would otherwise hold O(turns x length) ids).
    // The view stays exact: a segment only ever truncates back to its last prompt's length
    // (retry), never below a committed prompt, and a buffer it outgrows is no longer written.
    turn.prompt_ids = b.tokens.view(0, plan.prompt_ids.length);
    const last = turn.completion_ids[turn.completion_ids.length - 1];
    // After a prefill the harness holds one assistant turn: the prefill and what followed it.
    const prefill = plan.prefill ? plan.messages[plan.messages.length - 1]! : null;
    this.state = {
      messages: plan.messages,
      history: prefill ? plan.messages.slice(0, -1) : plan.messages,
      reply: prefill ? { ...reply, content: prefill.content + reply.content } : reply,
      lastPromptLength: plan.prompt_ids.length,
      endsWithEndOfTurn: last === codec.endOfTurnId,
      toolsKey: plan.toolsKey,
      lastTurn: turn,
    };
    this.release(plan);
    return { rolledBack };
  }

  /** Seals the open segment (end of session). */
  close(reason: "finished" | "aborted"): void {
    if (this.builder && this.builder.turnCount > 0) this.sealed.push({ builder: this.builder, reason });
    this.builder = null;
    this.state = null;
  }
}

/**
 * The ids of a plan's new pieces, back to back in one buffer that every plan
 * reuses (planning is synchronous), with where each piece ends and its
 * provenance; `assemble` copies them into the prompt.
 */
class NewPieces {
  readonly ids = new Growable(Int32Array, 1 << 14);
  readonly ends: number[] = [];
  readonly provenances: Supplied[] = [];

  reset(): void {
    this.ids.truncate(0);
    this.ends.length = 0;
    this.provenances.length = 0;
  }

  /** Ends a piece at the ids appended so far. */
  end(provenance: Supplied): void {
    this.ends.push(this.ids.length);
    this.provenances.push(provenance);
  }
}

const NEW_PIECES = new NewPieces();
const EMPTY = new Int32Array(0);

/**
 * Appends rendered text to NEW_PIECES: the harness's messages (`prompt`) and the
 * generation prompt the template appends (`template`). The split is made only
 * where it cannot change tokenization (the generation prompt starts with an
 * added token); otherwise the whole text stays `prompt`.
 */
function appendRendered(text: string, req: ChatRequest, codec: PromptCodec, window: number | null, kept: number, whole = false): void {
  probeFits(text, kept + NEW_PIECES.ids.length, window, codec);
  const gen = codec.template.generationPrompt(req.enable_thinking === undefined ? {} : { enableThinking: req.enable_thinking });
  // A whole render's long sections (system prompt, tool list) recur in other sessions: the tokenizer keeps them.
  const options = { keepSections: whole };
  const out = NEW_PIECES.ids;
  if (gen.length > 0 && text.endsWith(gen) && codec.tokenizer.startsWithAddedToken(gen)) {
    codec.tokenizer.encodeInto(text.slice(0, text.length - gen.length), out, options);
    NEW_PIECES.end(TokenProvenance.prompt);
    codec.tokenizer.encodeInto(gen, out);
    NEW_PIECES.end(TokenProvenance.template);
    return;
  }
  codec.tokenizer.encodeInto(text, out, options);
  NEW_PIECES.end(TokenProvenance.prompt);
}

function renderOptions(req: ChatRequest) {
  // A prefill is continued, not answered: no new assistant turn opens after it.
  const addGenerationPrompt = req.continue_final_message !== true;
  return req.enable_thinking === undefined ? { addGenerationPrompt } : { addGenerationPrompt, enableThinking: req.enable_thinking };
}

/** `text` cut after the prefill's content, so the completion continues it. */
function continueFinal(codec: PromptCodec, text: string, req: ChatRequest): string {
  const cut = codec.template.continueFinal(text, req.messages[req.messages.length - 1]!);
  if (cut === null) throw new InvalidRequestError("messages: the chat template does not render the final assistant message verbatim, so it cannot be continued", "messages");
  return cut;
}

function promptRouting(turn: Turn, offset: number, n: number) {
  const r = turn.prompt_routing;
  if (!r || turn.prompt_ids.length === 0) return null;
  const width = r.length / turn.prompt_ids.length;
  return r.subarray(offset * width, (offset + n) * width);
}

function sameMessages(a: ChatMessage[], b: ChatMessage[], n: number): boolean {
  for (let i = 0; i < n; i++) if (!sameMessage(a[i]!, b[i]!)) return false;
  return true;
}

/**
 * Identity first (cheap: the usual case is an untouched echo). Messages the harness wrote
 * must be equal, whitespace included (an edit the engine would not see otherwise); an
 * assistant reply may come back re-serialized (fingerprint.ts).
 */
export function sameMessage(a: ChatMessage, b: ChatMessage): boolean {
  if (a === b) return true;
  if (a.role !== b.role) return false;
  if (a.role !== "assistant") return a.content === b.content && a.tool_call_id === b.tool_call_id;
  if (a.content === b.content && sameCallsExactly(a, b)) return true;
  return assistantFingerprint(a) === assistantFingerprint(b);
}

function sameCallsExactly(a: ChatMessage, b: ChatMessage): boolean {
  const x = a.tool_calls ?? [];
  const y = b.tool_calls ?? [];
  if (x.length !== y.length) return false;
  for (let i = 0; i < x.length; i++) if (x[i]!.id !== y[i]!.id || x[i]!.arguments !== y[i]!.arguments) return false;
  return true;
}
