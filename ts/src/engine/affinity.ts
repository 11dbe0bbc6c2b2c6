/**
 * Session affinity over several engine replicas: every turn of one rollout goes to
 * the replica that holds its prefix.
 *
 * 1. An agent re-sends its whole history each turn, and an engine's prefix cache
 *    only helps if the next turn lands where the last one ran. So the router
 *    remembers, per session, the replica that served its latest turn, and sends
 *    the next turn there.
 * 2. That replica is skipped when it is full (`maxInFlight` requests of this
 *    router in flight there) or gone (`available()` false: its connection
 *    dropped, or a call failed with a transport error in the last
 *    `downForMs`). The turn then goes to the least-loaded available replica
 *    (fewest in flight, then fewest sessions, then lowest index), which becomes
 *    the session's home: the turn it serves leaves the newest prefix there.
 * 3. The session of a request is `sessionOf(req)`: by default the proxy's turn
 *    ids `<session>/turn-<n>` up to the last `/turn-`.
 * 4. A turn that fails part way is not retried elsewhere (its tokens were
 *    already streamed); the error goes to the caller, and the next turn is
 *    routed again.
 * This is the SGLang router's cache-aware idea reduced to what a rollout
 * knows for certain: which session a turn belongs to.
 */
import { EngineError, type EngineClient, type GenerateChunk, type GenerateRequest } from "./types.ts";

/** A replica the router can use; `available` is optional (HTTP engines report failures only through calls). */
export interface RoutedEngine extends EngineClient {
  available?(): boolean;
}

export interface AffinityConfig {
  /** Requests in flight on one replica before a session's turn goes elsewhere. Default 64 (the Python engine's max_running). */
  maxInFlight?: number;
  /** How long a replica whose call failed with a transport error is skipped. Default 5000 ms. */
  downForMs?: number;
  /** Sessions remembered at most; the least recently routed are forgotten first. Default 100,000. */
  maxSessions?: number;
  /** The session a request belongs to. Default: its request_id up to the last "/turn-" (the whole id without one). */
  sessionOf?: (req: GenerateRequest) => string;
}

/** The router's defaults, in one place (what `AffinityConfig` leaves out). */
export const AFFINITY_DEFAULTS = { maxInFlight: 64, downForMs: 5000, maxSessions: 100_000 } as const;

/** Every replica is gone: the request was not sent anywhere. */
export class NoReplicaError extends EngineError {
  constructor(requestId: string, replicas: number) {
    super("affinity", `request ${requestId}: none of the ${replicas} engine replicas is reachable`);
    this.name = "NoReplicaError";
  }
}

export function proxyTurnSession(req: GenerateRequest): string {
  const at = req.request_id.lastIndexOf("/turn-");
  return at < 0 ? req.request_id : req.request_id.slice(0, at);
}

interface Replica {
  client: RoutedEngine;
  inFlight: number;
  sessions: number;
  downUntil: number;
}

export class AffinityEngine implements EngineClient {
  readonly name = "affinity";
  private readonly replicas: Replica[];
  private readonly homes = new Map<string, number>();
  private readonly maxInFlight: number;
  private readonly downForMs: number;
  private readonly maxSessions: number;
  private readonly sessionOf: (req: GenerateRequest) => string;

  constructor(replicas: RoutedEngine[], config: AffinityConfig = {}) {
    if (replicas.length === 0) throw new EngineError("affinity", "needs at least one engine replica");
    this.replicas = replicas.map((client) => ({ client, inFlight: 0, sessions: 0, downUntil: 0 }));
    this.maxInFlight = config.maxInFlight ?? AFFINITY_DEFAULTS.maxInFlight;
    this.downForMs = config.downForMs ?? AFFINITY_DEFAULTS.downForMs;
    this.maxSessions = config.maxSessions ?? AFFINITY_DEFAULTS.maxSessions;
    this.sessionOf = config.sessionOf ?? proxyTurnSession;
  }

  /** Index of the replica the session's next turn would go to first (undefined: not routed yet or forgotten). */
  homeOf(session: string): number | undefined {
    return this.homes.get(session);
  }

  /** Requests of this router in flight on each replica. */
  load(): number[] {
    return this.replicas.map((r) => r.inFlight);
  }

  async *generate(req: GenerateRequest, signal?: AbortSignal): AsyncIterable<GenerateChunk> {
    const session = this.sessionOf(req);
    const index = this.route(session, req.request_id);
    const replica = this.replicas[index]!;
    replica.inFlight += 1;
    try {
      yield* replica.client.generate(req, signal);
    } catch (error) {
      // Aborts (not EngineErrors) and the engine's own answers (bad request, failed step) say nothing about reachability.
      if (error instanceof EngineError && !isEngineAnswer(error)) replica.downUntil = Date.now() + this.downForMs;
      throw error;
    } finally {
      replica.inFlight -= 1;
    }
  }

  async close(): Promise<void> {
    await Promise.all(this.replicas.map((r) => r.client.close()));
  }

  private route(session: string, requestId: string): number {
    const home = this.homes.get(session);
    if (home !== undefined && this.usable(this.replicas[home]!) && this.replicas[home]!.inFlight < this.maxInFlight) {
      this.remember(session, home);
      return home;
    }
    let best = -1;
    for (let i = 0; i < this.replicas.length; i++) {
      const r = this.replicas[i]!;
      if (!this.usable(r)) continue;
      const b = this.replicas[best];
      if (!b || r.inFlight < b.inFlight || (r.inFlight === b.inFlight && r.sessions < b.sessions)) best = i;
    }
    if (best < 0) throw new NoReplicaError(requestId, this.replicas.length);
    if (home !== undefined) this.replicas[home]!.sessions -= 1;
    this.replicas[best]!.sessions += 1;
    this.remember(session, best);
    return best;
  }

  private usable(r: Replica): boolean {
    return (r.client.available?.() ?? true) && Date.now() >= r.downUntil;
  }

  private remember(session: string, index: number): void {
    this.homes.delete(session); // re-insert: Map order is recency order
    this.homes.set(session, index);
    if (this.homes.size > this.maxSessions) {
      const [oldest, at] = this.homes.entries().next().value as [string, number];
      this.homes.delete(oldest);
      this.replicas[at]!.sessions -= 1;
    }
  }
}

/** An error the engine itself sent (ZmqEngine's EngineRequestError carries its code): the replica is reachable. */
function isEngineAnswer(error: EngineError): boolean {
  return "code" in error;
}
