/**
 * V8 flags for a process that hosts the proxy (`lego` sets them; the proxy
 * benchmark runs its proxy process with them too).
 *
 * --max-semi-space-size=64: a young generation of up to 2 x 64 MB instead of
 * Node 20's 2 x 16 MB. Every call in flight holds its request state while the
 * engine samples (hundreds of ms), so each scavenge of the small young
 * generation found ~30 % of it alive, copied it, and promoted much of it,
 * which then forced mark-compacts. In the paced proxy benchmark (64 agent
 * sessions, four paired runs) the larger young generation cut GC pauses from
 * ~31 to ~12 per run, GC time per request from ~0.18 to ~0.13 ms and the
 * in-hop p50 from ~1.7 to ~1.5 ms; the p99 (~6.5 ms) did not move. The memory
 * is only committed as the young generation grows under load.
 */
export const PROXY_NODE_FLAGS: readonly string[] = ["--max-semi-space-size=64"];
