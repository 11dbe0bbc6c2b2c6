/**
 * The embedded Python engine (`python -m lego_rl.engine`) over ZeroMQ, or over a
 * Unix socket when the engine runs on the same host (`unix:///PATH`; wire.ts).
 *
 * 1. One connection per client (a DEALER, or a Unix stream socket); every message
 *    is one msgpack control frame from schemas/records.toml (GenerateRequest,
 *    TokenChunk, GenerateResult, Abort, EngineHello/EngineInfo, Error). Replies
 *    are routed to the waiting `generate` by `request_id`.
 * 2. Tokens stream as TokenChunks (unless the request says `stream: false`: then
 *    the GenerateResult alone carries them, and `generate` yields them with it).
 *    A streamed request asks for `final_tokens_in_result` (schema 2.4): the tokens
 *    of the step that ends it come in the GenerateResult only, one frame less per
 *    call; `generate` yields the result's tokens past the streamed ones as token
 *    chunks of their own, each with the version that sampled it (an engine before
 *    2.4 streams them all, and none are past). A token's routing row exists only once the
 *    engine has fed it back as input, so the routing of the whole completion
 *    (and the prompt's) arrives with the GenerateResult: `generate` yields it as
 *    a last chunk with no new tokens, whose `routing_recorded` covers them all.
 *    The last sampled token is never fed back (the engine finishes in the step
 *    that samples it), so its row is zero padding with `routing_recorded` 0.
 * 3. Routing crosses the wire as uint16 and is narrowed to uint8 when the model
 *    has at most 256 experts, the schema's rule for Segment.routing.
 * 4. Aborting the signal sends Abort (the engine stops the request) and the
 *    iterator throws EngineAbortedError; an Error reply becomes EngineRequestError
 *    (`engine_failure` when a decode step failed under the request; the engine
 *    has already dropped it, so the Abort sent on the way out is answered with an
 *    unknown_request that nobody waits for). An `invalid_request` for a value the
 *    proxy's caller chose carries a `rejection` (types.ts): a temperature, top_p or
 *    seed the engine refuses, or a prompt at least `max_context` long (told apart
 *    from a prompt id outside the vocabulary by its length, not by the message).
 * 5. Weights may change under a running request (schema 1.2: a trainer sends
 *    update_weights on its own socket): each chunk carries the version that
 *    sampled it and the last chunk the oldest. This client never sends
 *    update_weights, so a weights_updated reply is counted as unrouted.
 * 6. A DEALER never reports a dead peer by itself, so the socket's monitor does
 *    (a Unix socket closes with the engine process): when the connection drops,
 *    every request in flight fails with an
 *    EngineError (the engine, restarted or not, will never answer them: a new
 *    connection is a new peer to its ROUTER) and `available()` is false until
 *    the connection is back; the next call says hello again.
 */
import { decodeControl, encodeControl, SCHEMA_VERSION, type ControlMessage, type EngineInfo, type GenerateResult, type RoutingArray as Routing, type TokenChunk } from "../schema/index.ts";
import { EngineAbortedError, EngineError, EngineUnavailableError, type EngineClient, type EngineRejection, type GenerateChunk, type GenerateRequest } from "./types.ts";
import { openWire, type ControlWire } from "./wire.ts";

/** The client's defaults, in one place (what `ZmqEngineConfig` leaves out). */
export const ZMQ_ENGINE_DEFAULTS = { helloTimeoutMs: 60_000 } as const;

export interface ZmqEngineConfig {
  /** Endpoint the engine bound, e.g. tcp://127.0.0.1:5556 or unix:///run/engine.sock (its "listening" line prints it; wire.ts). */
  address: string;
  /** Model the engine must serve (sent as GenerateRequest.model); omit to accept any. */
  model?: string;
  /** Policy version each request requires (Error policy_version otherwise); omit to accept what is live. */
  policyVersion?: () => number | null;
  /** Name sent in EngineHello, for the engine's logs. */
  clientId?: string;
  /** How long the first EngineInfo may take (engine start-up included) before calls fail. */
  helloTimeoutMs?: number;
}

/** The engine answered a request (or hello) with an Error frame: `code` as in docs/model.md, `field` when one is to blame. */
export class EngineRequestError extends EngineError {
  constructor(
    readonly code: string,
    readonly requestId: string | null,
    readonly field: string | null,
    detail: string,
    rejection: EngineRejection | null = null,
  ) {
    super("zmq", `${code}${requestId ? ` (request ${requestId})` : ""}: ${detail}`, { rejection });
    this.name = "EngineRequestError";
  }
}

/** The engine's `invalid_request` fields that name a value the proxy's caller chose. */
const CALLER_FIELDS = new Set(["sampling.temperature", "sampling.top_p", "sampling.seed"]);

/** What an Error frame says the caller can fix, if anything (module doc, point 4). */
function rejectionOf(code: string, field: string | null, promptTokens: number, info: EngineInfo | null): EngineRejection | null {
  if (code !== "invalid_request" || field === null) return null;
  if (CALLER_FIELDS.has(field)) return { field: field as EngineRejection["field"] };
  if (field === "prompt_token_ids" && info !== null && promptTokens >= info.max_context)
    return { field: "prompt_ids", promptTokens, contextWindow: info.max_context };
  return null;
}

export function isEngineRequestError(e: unknown): e is EngineRequestError {
  return e instanceof EngineRequestError;
}

type Reply = TokenChunk | GenerateResult | { kind: "failed"; error: Error };

/** Replies of one request, in arrival order; `next` waits for the next one. */
class ReplyQueue {
  private readonly items: Reply[] = [];
  private waiter: ((r: Reply) => void) | null = null;

  constructor(readonly promptTokens: number) {}

  push(reply: Reply): void {
    if (this.waiter) {
      const wake = this.waiter;
      this.waiter = null;
      wake(reply);
    } else this.items.push(reply);
  }

  /** Ends the stream now: replies still queued are dropped (after an abort nobody wants them). */
  fail(error: Error): void {
    this.items.length = 0;
    this.push({ kind: "failed", error });
  }

  next(): Promise<Reply> {
    const item = this.items.shift();
    if (item) return Promise.resolve(item);
    return new Promise((resolve) => (this.waiter = resolve));
  }
}

interface InfoWaiter {
  resolve: (info: EngineInfo) => void;
  reject: (e: Error) => void;
}

export class ZmqEngine implements EngineClient {
  readonly name = "zmq";
  private readonly wire: ControlWire;
  private readonly streams = new Map<string, ReplyQueue>();
  private readonly infoWaiters: InfoWaiter[] = [];
  private firstInfo: Promise<EngineInfo> | null = null;
  /** The first EngineInfo once it has arrived. */
  private info: EngineInfo | null = null;
  private closed = false;
  /** Replies that named no request this client is waiting for (late results of aborted requests, stray errors). */
  unrouted = 0;
  private connectionLost = false;
  private disconnectWaiters: (() => void)[] = [];

  constructor(private readonly config: ZmqEngineConfig) {
    this.wire = openWire(config.address, {
      frame: (bytes) => this.onFrame(bytes),
      connect: () => (this.connectionLost = false),
      disconnect: () => this.onDisconnect(),
      failed: (error) => {
        if (!this.closed) this.failAll(new EngineError(this.name, error.message, { cause: error }));
      },
    });
  }

  /** False from a dropped connection until it is back (never connected yet counts as available). */
  available(): boolean {
    return !this.connectionLost && !this.closed;
  }

  /** Resolves at the next time the engine's connection drops. */
  untilDisconnected(): Promise<void> {
    return new Promise((resolve) => this.disconnectWaiters.push(resolve));
  }

  /** Asks the engine what it serves (also checks the schema MAJOR); replies come in order, so this reflects every earlier message. */
  engineInfo(): Promise<EngineInfo> {
    const reply = new Promise<EngineInfo>((resolve, reject) => this.infoWaiters.push({ resolve, reject }));
    this.send({ kind: "engine_hello", client_id: this.config.clientId ?? "lego-proxy", schema_version: SCHEMA_VERSION }).catch((e: unknown) => {
      const waiter = this.infoWaiters.shift();
      waiter?.reject(new EngineError(this.name, `sending engine_hello failed: ${(e as Error).message}`, { cause: e }));
    });
    return reply;
  }

  async *generate(req: GenerateRequest, signal?: AbortSignal): AsyncIterable<GenerateChunk> {
    const info = await this.ready();
    const id = req.request_id;
    if (this.streams.has(id)) throw new EngineError(this.name, `request ${id} is already running on this client`);
    if (signal?.aborted) throw new EngineAbortedError(this.name, id);
    const queue = new ReplyQueue(req.prompt_ids.length);
    this.streams.set(id, queue);
    let abortSent = false;
    let finished = false;
    const abort = () => {
      if (abortSent || finished) return;
      abortSent = true;
      // Fire and forget: the engine answers with a GenerateResult (abort) that nobody waits for any more.
      this.send({ kind: "abort", request_id: id }).catch(() => undefined);
    };
    const onAbort = () => {
      abort();
      queue.fail(new EngineAbortedError(this.name, id));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      await this.send({
        kind: "generate",
        request_id: id,
        model: this.config.model ?? null,
        policy_version: this.config.policyVersion?.() ?? null,
        prompt_token_ids: req.prompt_ids instanceof Int32Array ? req.prompt_ids : Int32Array.from(req.prompt_ids),
        temperature: req.sampling.temperature,
        top_p: req.sampling.top_p,
        max_tokens: req.sampling.max_tokens,
        stop_token_ids: Int32Array.from(req.sampling.stop_token_ids),
        seed: req.sampling.seed,
        stream: req.stream !== false,
        final_tokens_in_result: req.stream !== false,
      });
      const streamed: number[] = [];
      for (;;) {
        const reply = await queue.next();
        if (reply.kind === "failed") throw reply.error;
        if (reply.kind === "token_chunk") {
          const ids = Array.from(reply.token_ids);
          streamed.push(...ids);
          yield { token_ids: ids, logprobs: Array.from(reply.logprobs), routing: null, policy_version: reply.policy_version, finish_reason: null };
          continue;
        }
        finished = true;
        yield* this.lastChunks(req, reply, streamed, info);
        return;
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      this.streams.delete(id);
      // The consumer stopped early (break, throw): the engine must not keep generating for nobody.
      if (!finished) abort();
    }
  }

  /** The engine's `max_context` (EngineInfo): prompt + completion at most. */
  async contextWindow(): Promise<number> {
    return (await this.ready()).max_context;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const [id, queue] of this.streams) {
      this.send({ kind: "abort", request_id: id }).catch(() => undefined);
      queue.fail(new EngineError(this.name, `client closed while request ${id} was running`));
    }
    for (const waiter of this.infoWaiters.splice(0)) waiter.reject(new EngineError(this.name, "client closed"));
    this.wire.close();
  }

  /** The first EngineInfo, fetched once: every request needs the routing shape and expert count. */
  private ready(): Promise<EngineInfo> {
    if (!this.firstInfo) {
      const timeoutMs = this.config.helloTimeoutMs ?? ZMQ_ENGINE_DEFAULTS.helloTimeoutMs;
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new EngineUnavailableError(this.name, `no engine_info from ${this.config.address} within ${timeoutMs} ms; is the engine running?`)), timeoutMs);
        timer.unref();
      });
      this.firstInfo = Promise.race([this.engineInfo(), timeout]).finally(() => clearTimeout(timer));
      this.firstInfo.then((info) => (this.info = info)).catch(() => undefined);
      // A failed hello is retried by the next call rather than cached forever.
      this.firstInfo.catch(() => (this.firstInfo = null));
    }
    return this.firstInfo;
  }

  /**
   * The end of a call from its GenerateResult: the last step's tokens when the engine left them to
   * the result (2.4), as token chunks of their own (one per run of the version that sampled them,
   * from `policy_versions`), then the last chunk, with the routing and the call's oldest version
   * (and every token when the completion was sent whole).
   */
  private lastChunks(req: GenerateRequest, result: GenerateResult, streamed: number[], info: EngineInfo): GenerateChunk[] {
    const ids = result.completion_token_ids;
    // The result has every token: those streamed first (all of them, all but the last step's, or none when sent whole), then the rest.
    const tail = streamed.length;
    if (ids.length < tail || streamed.some((t, i) => t !== ids[i])) {
      throw new EngineError(this.name, `request ${req.request_id}: result has ${ids.length} tokens but ${streamed.length} were streamed, or they differ`);
    }
    if (result.logprobs.length !== ids.length) {
      throw new EngineError(this.name, `request ${req.request_id}: result has ${ids.length} tokens but ${result.logprobs.length} logprobs`);
    }
    const whole = req.stream === false && tail === 0;
    const out: GenerateChunk[] = [];
    const versionAt = (k: number) => result.policy_versions?.[k] ?? result.policy_version;
    for (let from = tail, to = tail; !whole && from < ids.length; from = to) {
      while (to < ids.length && versionAt(to) === versionAt(from)) to++;
      out.push({ token_ids: Array.from(ids.subarray(from, to)), logprobs: Array.from(result.logprobs.subarray(from, to)), routing: null, policy_version: versionAt(from), finish_reason: null });
    }
    const width = result.moe_layers * result.top_k;
    const chunk: GenerateChunk = {
      token_ids: whole ? Array.from(ids) : [], logprobs: whole ? Array.from(result.logprobs) : [], routing: null, policy_version: result.policy_version, finish_reason: result.finish_reason,
      cached_prompt_tokens: result.cached_prompt_tokens,
    };
    out.push(chunk);
    if (width === 0) return out; // a dense model has no routing
    const shapeError = (what: string, values: Uint16Array, expected: string): EngineError =>
      new EngineError(this.name, `request ${req.request_id}: ${what} has ${values.length} values, expected ${expected} x [${result.moe_layers}, ${result.top_k}]`);
    const narrow = (values: Uint16Array): Routing => (info.num_experts <= 256 ? Uint8Array.from(values) : values);
    if (result.prompt_routing.length !== req.prompt_ids.length * width) {
      throw shapeError("prompt_routing", result.prompt_routing, `[${req.prompt_ids.length}]`);
    }
    chunk.prompt_routing = narrow(result.prompt_routing);
    // One row per completion token fed back: all but the last sampled one.
    const fed = Math.max(0, ids.length - 1);
    if (result.completion_routing.length !== fed * width) {
      throw shapeError("completion_routing", result.completion_routing, `[${fed}] (every completion token but the last)`);
    }
    const completion = new Uint16Array(ids.length * width);
    completion.set(result.completion_routing);
    chunk.routing = narrow(completion);
    chunk.routing_recorded = new Uint8Array(ids.length).fill(1, 0, fed);
    return out;
  }

  /** Sends go out in call order (wire.ts). */
  private send(message: ControlMessage): Promise<void> {
    if (this.closed && message.kind !== "abort") return Promise.reject(new EngineError(this.name, "client is closed"));
    return this.wire.send(encodeControl(message));
  }

  private onFrame(frame: Uint8Array): void {
    let message: ControlMessage;
    try {
      message = decodeControl(frame);
    } catch {
      // A frame we cannot read names no request we could fail: count it so tests and logs see it.
      this.unrouted += 1;
      return;
    }
    switch (message.kind) {
      case "engine_info":
        this.infoWaiters.shift()?.resolve(message);
        return;
      case "token_chunk":
      case "generate_result":
        return this.route(message.request_id, message);
      case "error": {
        const queue = message.request_id === null ? undefined : this.streams.get(message.request_id);
        const rejection = queue ? rejectionOf(message.code, message.field, queue.promptTokens, this.info) : null;
        const error = new EngineRequestError(message.code, message.request_id, message.field, message.message, rejection);
        if (queue) return queue.push({ kind: "failed", error });
        // This client sends only hellos without a request id, so an unattributed error answers the oldest hello.
        const waiter = message.request_id === null ? this.infoWaiters.shift() : undefined;
        if (waiter) waiter.reject(error);
        else this.unrouted += 1;
        return;
      }
      default: // weights_updated (answers an update_weights this client does not send) or a kind an engine never sends
        this.unrouted += 1;
    }
  }

  private route(requestId: string, reply: Reply): void {
    const queue = this.streams.get(requestId);
    if (queue) queue.push(reply);
    else this.unrouted += 1;
  }

  private onDisconnect(): void {
    if (this.closed) return;
    this.connectionLost = true;
    this.firstInfo = null; // whatever answers next (a restarted engine) is asked again
    this.failAll(new EngineError(this.name, `the connection to ${this.config.address} dropped; requests in flight there are lost`));
    for (const wake of this.disconnectWaiters.splice(0)) wake();
  }

  private failAll(error: Error): void {
    for (const queue of this.streams.values()) queue.fail(error);
    for (const waiter of this.infoWaiters.splice(0)) waiter.reject(error);
  }
}
