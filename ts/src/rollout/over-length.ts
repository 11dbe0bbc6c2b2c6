/**
 * Nothing silently cut: a rollout with a segment longer than the trainer's
 * maximum sequence (a segment is what the trainer runs one forward pass on)
 * meets an explicit policy before it ships, and its record says which
 * (`over_length`: action, original length, limit).
 *  - `drop`: the record ships with no segments and no reward, so no reader
 *    trains on it, yet the trainer sees it accounted for; the group's other
 *    rollouts keep their own baseline.
 *  - `truncate`: every over-long segment keeps its first `limit` tokens; every
 *    per-token column (logprobs, loss mask, provenance, routing) is cut with
 *    it, so the loss mask is shortened to what the trainer sees; a turn whose
 *    completion starts past the cut is gone, one that straddles it ends there.
 *    The reward stays the whole rollout's (the cut part's credit goes to the
 *    kept prefix: that bias is why `drop` is the default).
 * Pure, so the rules are tested without Docker.
 */
import type { OverLength, RoutingShape, Segment } from "../schema/index.ts";

export const OVER_LENGTH_POLICIES = ["drop", "truncate"] as const;
export type OverLengthPolicy = (typeof OVER_LENGTH_POLICIES)[number];

export interface LengthPolicy {
  /** The trainer's maximum sequence in tokens; null = no bound. */
  maxSequenceTokens: number | null;
  overLength: OverLengthPolicy;
}

/** The segments to ship under `policy` and, when one was over the limit, the record's verdict (null: within it). */
export function fitToLength(segments: readonly Segment[], policy: LengthPolicy | null, routing: RoutingShape | null): { segments: Segment[]; overLength: OverLength | null } {
  const limit = policy?.maxSequenceTokens ?? null;
  const longest = segments.reduce((m, s) => Math.max(m, s.token_ids.length), 0);
  if (limit === null || longest <= limit) return { segments: [...segments], overLength: null };
  if (policy!.overLength === "drop") return { segments: [], overLength: { action: "dropped", tokens: longest, limit } };
  return {
    segments: segments.map((s) => (s.token_ids.length > limit ? truncateSegment(s, limit, routing) : s)),
    overLength: { action: "truncated", tokens: longest, limit },
  };
}

/** What the worker's log says about a record's over-length verdict. */
export function overLengthReason(o: OverLength): string {
  return o.action === "dropped"
    ? `longest segment of ${o.tokens} tokens is longer than the trainer's ${o.limit} tokens: dropped (shipped without segments or reward)`
    : `longest segment of ${o.tokens} tokens cut to the trainer's ${o.limit} tokens`;
}

export function truncateSegment(s: Segment, limit: number, routing: RoutingShape | null): Segment {
  // Routing is flattened [tokens, layers, top_k]: a token's experts are layers × top_k values.
  const perToken = routing ? routing.layers * routing.top_k : 0;
  return {
    ...s,
    token_ids: s.token_ids.slice(0, limit),
    logprobs: s.logprobs.slice(0, limit),
    loss_mask: s.loss_mask.slice(0, limit),
    provenance: s.provenance.slice(0, limit),
    routing: s.routing ? s.routing.slice(0, limit * perToken) : null,
    routing_recorded: s.routing_recorded ? s.routing_recorded.slice(0, limit) : null,
    turns: s.turns.filter((span) => span.completion_start < limit).map((span) => ({ ...span, completion_end: Math.min(span.completion_end, limit) })),
  };
}
