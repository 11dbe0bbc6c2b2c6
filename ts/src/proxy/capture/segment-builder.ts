/**
 * Builds one Segment token by token. Every token carries its provenance
 * (records.toml TokenProvenance); only sampled tokens with a finite logprob
 * enter the loss mask, so a token whose origin is not proven never trains.
 *
 * Routing is flattened [tokens, layers, top_k] (width = layers * top_k per
 * token). Tokens without a recorded routing (prompt, template) are padded with
 * zeros and flagged 0 in `routing_recorded` so the trainer routes them itself.
 */
import { TokenProvenance, type FinishReason, type Routing, type Segment, type SealReason, type SegmentThread, type TurnSpan } from "../records.ts";
import { Growable } from "./growable.ts";

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
    this.appendRouting(ids.length, routing ?? null);
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
    this.appendRouting(ids.length, routing, routingRecorded);
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
  }

  provenanceAt(i: number): number {
    return this.provenance.at(i);
  }

  private appendRouting(n: number, routing: Routing | null, recorded: Uint8Array | null = null): void {
    if (routing && routing.length > 0 && !this.routing) {
      if (routing.length % n !== 0)
        throw new RoutingShapeError(`routing of ${routing.length} values does not split over ${n} tokens`);
      this.routingWidth = routing.length / n;
      this.routing = routing instanceof Uint16Array ? new Growable(Uint16Array) : new Growable(Uint8Array);
      this.routingRecorded = new Growable(Uint8Array);
      // Tokens before the first routed turn were never routed by the engine.
      this.routing.fill(0, (this.tokens.length - n) * this.routingWidth);
      this.routingRecorded.fill(0, this.tokens.length - n);
    }
    if (!this.routing || !this.routingRecorded) return;
    if (routing && routing.length > 0) {
      if (routing.length !== n * this.routingWidth)
        throw new RoutingShapeError(`expected ${n} x ${this.routingWidth} routing values, got ${routing.length}`);
      if (routing instanceof Uint16Array && this.routing.view() instanceof Uint8Array)
        throw new RoutingShapeError("routing switched from uint8 to uint16 inside one segment");
      this.routing.pushAll(routing);
      if (recorded) this.routingRecorded.pushAll(recorded);
      else this.routingRecorded.fill(1, n);
    } else {
      this.routing.fill(0, n * this.routingWidth);
      this.routingRecorded.fill(0, n);
    }
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
