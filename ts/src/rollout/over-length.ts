/**
 * Nothing silently cut: a trajectory with a segment longer than the trainer's
 * maximum sequence (a segment is what the trainer runs one forward pass on)
 * meets an explicit policy before it ships.
 *  - `drop`: it does not ship; the worker says so (an `over_length` event with
 *    the reason, counted in the summary) and the group ships without it.
 *  - `truncate`: every over-long segment keeps its first `limit` tokens; every
 *    per-token column (logprobs, loss mask, provenance, routing) is cut with
 *    it, so the loss mask is shortened to what the trainer sees; a turn whose
 *    completion starts past the cut is gone, one that straddles it ends there.
 *    The reward stays the whole rollout's (the cut part's credit goes to the
 *    kept prefix: that bias is why `drop` is the default).
 * Pure, so the rules are tested without Docker.
 */
import { validateRecords, type RoutingShape, type Segment, type Trajectory } from "../schema/index.ts";

export const OVER_LENGTH_POLICIES = ["drop", "truncate"] as const;
export type OverLengthPolicy = (typeof OVER_LENGTH_POLICIES)[number];

export interface LengthPolicy {
  /** The trainer's maximum sequence in tokens; null = no bound. */
  maxSequenceTokens: number | null;
  overLength: OverLengthPolicy;
}

export interface OverLength {
  trajectoryId: string;
  /** Tokens of its longest segment. */
  tokens: number;
  limit: number;
  action: "dropped" | "truncated";
  /** What the record says happened, for the log. */
  reason: string;
}

/** The trajectory to ship (null when dropped) and, when it was over the limit, what was done. */
export function applyLengthPolicy(t: Trajectory, policy: LengthPolicy, routing: RoutingShape | null): { trajectory: Trajectory | null; overLength: OverLength | null } {
  const limit = policy.maxSequenceTokens;
  if (limit === null) return { trajectory: t, overLength: null };
  const longest = t.segments.reduce((m, s) => Math.max(m, s.token_ids.length), 0);
  if (longest <= limit) return { trajectory: t, overLength: null };
  const over = t.segments.filter((s) => s.token_ids.length > limit).length;
  if (policy.overLength === "drop") {
    return { trajectory: null, overLength: { trajectoryId: t.trajectory_id, tokens: longest, limit, action: "dropped", reason: `${over} segment(s) longer than the trainer's ${limit} tokens (longest ${longest}): dropped` } };
  }
  const cut = { ...t, segments: t.segments.map((s) => (s.token_ids.length > limit ? truncateSegment(s, limit, routing) : s)) };
  validateRecords("Trajectory", [cut], routing);
  return { trajectory: cut, overLength: { trajectoryId: t.trajectory_id, tokens: longest, limit, action: "truncated", reason: `${over} segment(s) cut to the trainer's ${limit} tokens (longest was ${longest})` } };
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
