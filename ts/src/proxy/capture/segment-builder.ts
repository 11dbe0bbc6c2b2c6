/**
 * Builds one Segment token by token. Every token carries its provenance
 * (records.toml TokenProvenance); only sampled tokens with a finite logprob
 * enter the loss mask, so a token whose origin is not proven never trains.
 *
 * Routing is flattened [tokens, layers, top_k] (width = layers * top_k per
 * token). Tokens without a recorded routing (prompt, template) are padded with
 * zeros and flagged 0 in `routing_recorded` so the trainer routes them itself.
 *
 * Engines report one routing row per token fed as input, so a turn's last sampled
 * token has none (it was never fed back). The next turn's prefill feeds it: when
 * that turn extends the segment, `fillFromPrefill` takes the missing rows from its
 * prompt routing, for sampled tokens only if the same policy version sampled them.
 */
import { TokenProvenance, type FinishReason, type Routing, type Segment, type SealReason, type SegmentThread, type TurnSpan } from "../records.ts";
import { Growable } from "../growable.ts";

export class RoutingShapeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RoutingShapeError";
  }
}

export class SegmentBuilder {
  readonly tokens = new Growable(Int32Array);
  private readonly logprobs = new Growable(Float32Array);
  private readonly provenance = new Growable(Uint8Array);
  private routing: Growable<Uint8Array> | Growable<Uint16Array> | null = null;
  private routingRecorded: Growable<Uint8Array> | null = null;
  private routingWidth = 0;
  private spans: TurnSpan[] = [];
  /**
   * Runs of tokens whose routing is padding, in order: `version` is the policy version
   * that sampled them, null for tokens the harness or template supplied.
   */
  private holes: Array<{ start: number; end: number; version: number | null }> = [];

  constructor(readonly segmentId: string) {}

  get length(): number {
    return this.tokens.length;
  }

  get turnCount(): number {
    return this.spans.length;
  }

  /** Tokens the harness or template supplied; never trainable. */
  appendSupplied(ids: ArrayLike<number>, provenance: typeof TokenProvenance.prompt | typeof TokenProvenance.template, routing?: Routing | null): void {
    this.tokens.pushAll(ids);
    this.logprobs.fill(0, ids.length);
    this.provenance.fill(provenance, ids.length);
    this.appendRouting(ids.length, routing ?? null, null, null);
  }

  /** A completion the engine sampled. `routing` is [n, layers, top_k] or null. */
  appendSampled(
    turn: { turn_id: string; policy_version: number; finish_reason: FinishReason },
    ids: ArrayLike<number>,
    logprobs: ArrayLike<number>,
    routing: Routing | null,
    /** Per token: 1 where `routing` is the engine's real choice, 0 where it is padding; default all 1. */
    routingRecorded: Uint8Array | null = null,
  ): void {
    if (logprobs.length !== ids.length)
      throw new RangeError(`turn ${turn.turn_id}: ${ids.length} tokens but ${logprobs.length} logprobs`);
    const start = this.tokens.length;
    this.tokens.pushAll(ids);
    this.logprobs.pushAll(logprobs);
    this.provenance.fill(TokenProvenance.sampled, ids.length);
    this.appendRouting(ids.length, routing, routingRecorded, turn.policy_version);
    this.spans.push({
      turn_id: turn.turn_id,
      completion_start: start,
      completion_end: this.tokens.length,
      policy_version: turn.policy_version,
      finish_reason: turn.finish_reason,
    });
  }

  /** Drops the last turn's completion and anything after it (a retry replaced it). */
  rollBackLastTurn(): TurnSpan | undefined {
    const span = this.spans.pop();
    if (!span) return undefined;
    this.truncate(span.completion_start);
    return span;
  }

  truncate(n: number): void {
    this.tokens.truncate(n);
    this.logprobs.truncate(n);
    this.provenance.truncate(n);
    this.routing?.truncate(n * this.routingWidth);
    this.routingRecorded?.truncate(n);
    while (this.holes.length > 0 && this.holes[this.holes.length - 1]!.start >= n) this.holes.pop();
    const last = this.holes[this.holes.length - 1];
    if (last && last.end > n) last.end = n;
  }

  /**
   * Fills padded routing rows before `upTo` from a later call's prefill: `promptRouting`
   * is its [prompt, layers, top_k] routing, and this segment's first `upTo` tokens are
   * the start of its prompt. Sampled tokens are filled only when `version` (the policy
   * version of that call) sampled them too; supplied tokens whenever.
   */
  fillFromPrefill(promptRouting: Routing, promptLength: number, upTo: number, version: number): void {
    if (!this.routing || !this.routingRecorded || this.holes.length === 0 || promptLength === 0) return;
    const width = this.routingWidth;
    if (promptRouting.length !== promptLength * width)
      throw new RoutingShapeError(`prompt routing of ${promptRouting.length} values is not ${promptLength} x ${width}`);
    const routing = this.routing.view();
    const recorded = this.routingRecorded.view();
    const end = Math.min(upTo, promptLength);
    const kept: typeof this.holes = [];
    for (const hole of this.holes) {
      const to = Math.min(hole.end, end);
      if (hole.start >= to || (hole.version !== null && hole.version !== version)) {
        kept.push(hole);
        continue;
      }
      routing.set(promptRouting.subarray(hole.start * width, to * width), hole.start * width);
      recorded.fill(1, hole.start, to);
      if (to < hole.end) kept.push({ ...hole, start: to });
    }
    this.holes = kept;
  }

  provenanceAt(i: number): number {
    return this.provenance.at(i);
  }

  /** `version`: the policy version that sampled these tokens; null when they were supplied. */
  private appendRouting(n: number, routing: Routing | null, recorded: Uint8Array | null, version: number | null): void {
    const start = this.tokens.length - n;
    if (routing && routing.length > 0 && !this.routing) {
      if (routing.length % n !== 0)
        throw new RoutingShapeError(`routing of ${routing.length} values does not split over ${n} tokens`);
      this.routingWidth = routing.length / n;
      this.routing = routing instanceof Uint16Array ? new Growable(Uint16Array) : new Growable(Uint8Array);
      this.routingRecorded = new Growable(Uint8Array);
      // Tokens before the first routed turn were never routed by the engine.
      this.routing.fill(0, start * this.routingWidth);
      this.routingRecorded.fill(0, start);
      if (start > 0) this.holes.push({ start: 0, end: start, version: null });
    }
    if (!this.routing || !this.routingRecorded) return;
    if (routing && routing.length > 0) {
      if (routing.length !== n * this.routingWidth)
        throw new RoutingShapeError(`expected ${n} x ${this.routingWidth} routing values, got ${routing.length}`);
      if (routing instanceof Uint16Array && this.routing.view() instanceof Uint8Array)
        throw new RoutingShapeError("routing switched from uint8 to uint16 inside one segment");
      this.routing.pushAll(routing);
      if (recorded) {
        this.routingRecorded.pushAll(recorded);
        for (let i = 0; i < n; i++) if (recorded[i] === 0) this.addHole(start + i, version);
      } else this.routingRecorded.fill(1, n);
    } else {
      this.routing.fill(0, n * this.routingWidth);
      this.routingRecorded.fill(0, n);
      if (n > 0) this.holes.push({ start, end: start + n, version });
    }
  }

  private addHole(at: number, version: number | null): void {
    const last = this.holes[this.holes.length - 1];
    if (last && last.end === at && last.version === version) last.end = at + 1;
    else this.holes.push({ start: at, end: at + 1, version });
  }

  seal(reason: SealReason, thread: SegmentThread, threadId: string): Segment {
    const provenance = this.provenance.copy();
    const logprobs = this.logprobs.copy();
    const loss_mask = new Uint8Array(provenance.length);
    for (let i = 0; i < provenance.length; i++)
      loss_mask[i] = provenance[i] === TokenProvenance.sampled && Number.isFinite(logprobs[i]!) ? 1 : 0;
    return {
      segment_id: this.segmentId,
      thread,
      thread_id: threadId,
      seal_reason: reason,
      token_ids: this.tokens.copy(),
      logprobs,
      loss_mask,
      provenance,
      routing: this.routing ? this.routing.copy() : null,
      routing_recorded: this.routingRecorded ? this.routingRecorded.copy() : null,
      turns: this.spans.map((s) => ({ ...s })),
    };
  }
}
