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
