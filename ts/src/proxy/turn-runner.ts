/**
 * One LLM call, API-neutral: plan the prompt ids, stream the engine's tokens,
 * decode and parse them into reply events, and record the Turn.
 * The API adapters (openai-chat, anthropic-messages, openai-responses) only
 * translate these events into their own wire shapes.
 */
import type { EngineClient, EngineRejection } from "../engine/index.ts";
import { EngineAbortedError, EngineUnavailableError, isEngineRejection } from "../engine/index.ts";
import type { AssistantReply, ChatMessage, ChatRequest, ReplyStop, ToolCall } from "./chat.ts";
import type { SessionCapture } from "./capture/session-capture.ts";
import type { PromptCodec, PromptPlan, ThreadCapture } from "./capture/thread-capture.ts";
import { ClientGoneError, InvalidRequestError, PromptTooLongError, ProxyEngineError, ProxyEngineUnavailableError, type ProxyError } from "./errors.ts";
import type { FinishReason, Routing, Turn } from "./records.ts";
import { CompletionParser, type ToolCallFormat } from "./tool-calls.ts";

export type ReplyEvent =
  /** The engine answered (first chunk arrived); comes first, before any content. */
  | { kind: "start"; prompt_tokens: number }
  | { kind: "text"; text: string }
  | { kind: "reasoning"; text: string }
  | { kind: "tool_call"; call: ToolCall }
  | { kind: "done"; stop: ReplyStop; usage: Usage; reply: AssistantReply };

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
}

export interface RunnerConfig {
  engine: EngineClient;
  codec: PromptCodec & { stopTokenIds: number[] };
  toolCallFormat: ToolCallFormat;
  /** Used when the request sets no max_tokens, and as an upper bound. */
  maxTokens: number;
}

/** What a call needs from its request once its prompt is planned. */
type CallOptions = Pick<ChatRequest, "tools" | "tool_choice" | "sampling" | "continue_final_message">;

/** Every tool the model may call: the prompt's and the deferred ones (a tool result may have brought them in). */
function callableTools(req: ChatRequest) {
  const deferred = req.deferred_tools;
  return deferred && deferred.length > 0 ? req.tools.concat(deferred) : req.tools;
}

/**
 * Plans the prompt now (a template or tokenizer error, or a prompt over `window`, throws
 * here) and streams one call. The stream throws ClientGoneError when `signal` aborts,
 * InvalidRequestError when the engine refuses a value the client chose, and
 * ProxyEngineError when the engine fails.
 */
export function runTurn(
  cfg: RunnerConfig,
  capture: SessionCapture,
  req: ChatRequest,
  toolCallIdPrefix: string,
  signal: AbortSignal,
  /** The engine's context window (prompt + completion), null when unknown. */
  window: number | null = null,
): AsyncGenerator<ReplyEvent> {
  const { thread, plan } = capture.plan(req, window);
  // Only the tools and sampling settings travel on. The parsed history (up to
  // hundreds of KB of strings per call) then dies young while the engine works,
  // instead of surviving scavenges, and being copied by them, for every call in flight.
  const options: CallOptions = { tools: callableTools(req), tool_choice: req.tool_choice, sampling: req.sampling, continue_final_message: req.continue_final_message === true };
  return streamTurn(cfg, capture, thread, plan, options, toolCallIdPrefix, signal, window);
}

async function* streamTurn(
  cfg: RunnerConfig,
  capture: SessionCapture,
  thread: ThreadCapture,
  plan: PromptPlan,
  req: CallOptions,
  toolCallIdPrefix: string,
  signal: AbortSignal,
  window: number | null,
): AsyncGenerator<ReplyEvent> {
  const turnId = capture.nextTurnId();
  const started = performance.now();
  const started_at_ms = Date.now();
  let firstTokenMs: number | null = null;
  const ids: number[] = [];
  const logprobs: number[] = [];
  const routing: Routing[] = [];
  const recorded: number[] = [];
  let anyUnrecorded = false;
  let promptRouting: Routing | null = null;
  let policyVersion = -1;
  let finish: FinishReason | null = null;
  const parseCalls = req.tools.length > 0 && req.tool_choice !== "none";
  const parser = new CompletionParser(cfg.toolCallFormat, req.tools, parseCalls, req.continue_final_message === true);
  const decoder = new IncrementalDecoder(cfg.codec, cfg.codec.stopTokenIds);
  const reply: AssistantReply = { reasoning: null, content: "", tool_calls: [] };
  const makeTurn = (finish_reason: FinishReason): Turn => ({
    turn_id: turnId,
    session_id: capture.sessionId,
    thread_id: capture.threadId(thread),
    prompt_ids: plan.prompt_ids,
    completion_ids: Int32Array.from(ids),
    logprobs: Float32Array.from(logprobs),
    routing: concatRouting(routing),
    prompt_routing: promptRouting,
    policy_version: policyVersion,
    finish_reason,
    timings: { started_at_ms, first_token_ms: firstTokenMs, duration_ms: performance.now() - started },
  });
  function* apply(events: ReturnType<CompletionParser["push"]>): Generator<ReplyEvent> {
    for (const e of events) {
      if (e.kind === "tool_call") {
        const call: ToolCall = { id: `${toolCallIdPrefix}${turnId.split("/turn-")[1]}_${reply.tool_calls.length}`, ...e.call };
        reply.tool_calls.push(call);
        yield { kind: "tool_call", call };
      } else {
        if (e.kind === "text") reply.content += e.text;
        else reply.reasoning = (reply.reasoning ?? "") + e.text;
        yield e;
      }
    }
  }
  // The window's rest, as engines clamp it (vLLM refuses a request that asks for more).
  const room = window === null ? Infinity : window - plan.prompt_ids.length;
  const maxTokens = Math.min(req.sampling.max_tokens ?? cfg.maxTokens, cfg.maxTokens, room);
  try {
    const stream = cfg.engine.generate(
      {
        request_id: turnId,
        prompt_ids: plan.prompt_ids,
        // The next call of this thread re-sends this prompt and more: the engine client may reuse its encoding.
        prefix_key: `${capture.sessionId}/${capture.threadId(thread)}`,
        sampling: {
          temperature: req.sampling.temperature ?? 1,
          top_p: req.sampling.top_p ?? 1,
          max_tokens: maxTokens,
          stop_token_ids: cfg.codec.stopTokenIds,
          seed: req.sampling.seed ?? null,
        },
      },
      signal,
    );
    for await (const chunk of stream) {
      if (signal.aborted) break;
      if (policyVersion === -1) yield { kind: "start", prompt_tokens: plan.prompt_ids.length };
      if (chunk.token_ids.length > 0 && firstTokenMs === null) firstTokenMs = performance.now() - started;
      // Element by element: a whole completion comes as one chunk, and spreading 10^5 values overflows the stack.
      for (const id of chunk.token_ids) ids.push(id);
      for (const lp of chunk.logprobs) logprobs.push(lp);
      if (chunk.routing) {
        routing.push(chunk.routing);
        if (chunk.routing_recorded) {
          for (const r of chunk.routing_recorded) recorded.push(r);
          anyUnrecorded ||= chunk.routing_recorded.includes(0);
        } else for (let i = 0; i < chunk.token_ids.length; i++) recorded.push(1);
      }
      if (chunk.prompt_routing) promptRouting = chunk.prompt_routing;
      policyVersion = chunk.policy_version;
      yield* apply(parser.push(decoder.push(chunk.token_ids)));
      if (chunk.finish_reason) {
        finish = chunk.finish_reason;
        break;
      }
    }
  } catch (e) {
    if (e instanceof EngineAbortedError || signal.aborted) {
      capture.recordFailed(makeTurn("abort"), "aborted");
      throw new ClientGoneError(capture.sessionId, turnId);
    }
    if (isEngineRejection(e)) {
      capture.recordFailed(makeTurn("error"), "rejected");
      throw rejectionError(e.rejection, e.message);
    }
    capture.recordFailed(makeTurn("error"), "error");
    if (e instanceof EngineUnavailableError) throw new ProxyEngineUnavailableError(e);
    throw new ProxyEngineError(capture.sessionId, turnId, e);
  }
  if (signal.aborted) {
    capture.recordFailed(makeTurn("abort"), "aborted");
    throw new ClientGoneError(capture.sessionId, turnId);
  }
  if (finish === null || finish === "error" || finish === "abort") {
    capture.recordFailed(makeTurn(finish ?? "error"), "error");
    throw new ProxyEngineError(capture.sessionId, turnId, new Error(`engine ended the stream with finish_reason ${finish}`));
  }
  yield* apply(parser.push(decoder.flush()));
  yield* apply(parser.finish());
  const turn = makeTurn(finish);
  const message: ChatMessage = { role: "assistant", content: reply.content, reasoning: reply.reasoning, tool_calls: reply.tool_calls };
  capture.commit(thread, plan, turn, message, anyUnrecorded ? Uint8Array.from(recorded) : null, parser.malformedCalls);
  const stop: ReplyStop = finish === "length" ? "max_tokens" : reply.tool_calls.length > 0 ? "tool_calls" : "end_turn";
  yield { kind: "done", stop, usage: { prompt_tokens: plan.prompt_ids.length, completion_tokens: ids.length }, reply };
}

/** An engine's refusal as the client's error: the request field is the API's (`top_p`, not `sampling.top_p`). */
function rejectionError(r: EngineRejection, message: string): ProxyError {
  if (r.field === "prompt_ids" && r.promptTokens !== undefined && r.contextWindow !== undefined) return new PromptTooLongError(r.promptTokens, r.contextWindow);
  const param = r.field === "prompt_ids" ? "messages" : r.field.slice("sampling.".length);
  return new InvalidRequestError(`${param}: refused by the engine: ${message}`, param);
}

/**
 * Decodes ids as they stream. Byte-level BPE splits multi-byte characters
 * across tokens, so ids whose text ends in U+FFFD are held until the next push.
 * Stop tokens (the end-of-turn token) are not part of the reply text.
 */
class IncrementalDecoder {
  private pending: number[] = [];
  private readonly stops: Set<number>;

  constructor(
    private readonly codec: { tokenizer: { decode(ids: ArrayLike<number>): string } },
    stopIds: number[],
  ) {
    this.stops = new Set(stopIds);
  }

  push(ids: number[]): string {
    for (const id of ids) if (!this.stops.has(id)) this.pending.push(id);
    if (this.pending.length === 0) return "";
    const text = this.codec.tokenizer.decode(this.pending);
    if (text.endsWith("\uFFFD") && this.pending.length < 8) return "";
    this.pending = [];
    return text;
  }

  flush(): string {
    if (this.pending.length === 0) return "";
    const text = this.codec.tokenizer.decode(this.pending);
    this.pending = [];
    return text;
  }
}

function concatRouting(parts: Routing[]): Routing | null {
  if (parts.length === 0) return null;
  if (parts.length === 1) return parts[0]!;
  const n = parts.reduce((s, p) => s + p.length, 0);
  const out = parts[0] instanceof Uint16Array ? new Uint16Array(n) : new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}
