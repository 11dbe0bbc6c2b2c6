/** Nearest-rank percentile (no interpolation). */
export function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

/**
 * Per-request added latency of a path: for every request both the path and the
 * direct reference sent (same session, same turn, same bytes; the engine waits
 * the same decode time for both), the path's latency minus the direct one's.
 * Percentiles are taken over these differences, never differenced themselves;
 * negative differences (the direct call was the slower one) are kept.
 */
export function pairedAdded(path: Map<string, number>, direct: Map<string, number>): number[] {
  const out: number[] = [];
  for (const [key, ms] of path) {
    const ref = direct.get(key);
    if (ref !== undefined) out.push(ms - ref);
  }
  return out;
}

/** Wall-clock milliseconds (performance.timeOrigin + now): comparable across the bench's processes on one host. */
export const wallMs = () => performance.timeOrigin + performance.now();

/** The driver's view of one request: when it started sending and when the reply's last byte arrived (wall ms). */
export type DriverSpan = { start: number; end: number };
/** The engine's view: request seen (HTTP headers, or the control frame's bytes), request read (body, or frame decoded), last token out. */
export type EngineSpan = { in: number; read: number; out: number };
/**
 * The proxy's view: handler entered, its body and plan phases (ms), the engine call made, the final
 * chunk had, the response finished. `end` is for the record only: 'finish' comes a loop turn after the
 * reply's bytes left, often after the client has them, so no segment ends there.
 */
export type ProxySpan = { start: number; body_ms: number; plan_ms: number; call: number; last: number; end: number };

/** Where a request's time outside the engine's decode went, per segment (ms), in order along the path. */
export type PathSegments = Record<string, number>;

/** Direct: client -> engine handler, the body read there, and the reply from the last token to the client. */
export function directSegments(d: DriverSpan, e: EngineSpan): PathSegments {
  return { to_handler: e.in - d.start, body: e.read - e.in, reply_to_client: d.end - e.out };
}

/**
 * Through the proxy: client -> proxy handler, its body and plan phases, plan -> the engine
 * has read the call (engine client, wire, decode), last token -> the proxy has the final
 * chunk, and from there to the client having the reply (detokenize, parse, record, write, deliver).
 */
export function proxySegments(d: DriverSpan, p: ProxySpan, e: EngineSpan): PathSegments {
  const planned = p.start + p.body_ms + p.plan_ms;
  return {
    to_handler: p.start - d.start,
    body: p.body_ms,
    plan: p.plan_ms,
    to_engine: e.read - planned,
    engine_to_proxy: p.last - e.out,
    reply_to_client: d.end - p.last,
  };
}

/** Per segment, its p50 over requests (segments keep the order of the first request's). */
export function segmentMedians(rows: PathSegments[]): Record<string, number> {
  const out: Record<string, number> = {};
  if (rows.length === 0) return out;
  for (const k of Object.keys(rows[0]!)) out[k] = Number(pct(rows.map((r) => r[k]!), 50).toFixed(3));
  return out;
}
