/**
 * V8 flags for a process that hosts the proxy (`lego` sets them on node's
 * command line; the proxy benchmark runs its proxy process with them too).
 *
 * The proxy's heap has two kinds of data: long-lived (the tokenizer, every
 * session's history and records) and per-call state that lives while the
 * engine samples (hundreds of ms). Node 20's defaults collect such a heap
 * badly in both generations:
 *
 * --max-semi-space-size=32: a young generation of up to 2 x 32 MB instead of
 *   2 x 16 MB, so a scavenge does not find most calls in flight still alive
 *   and promote their state (which then needs full collections to free).
 *   64 MB did that too, but then V8 starts incremental marking whenever the
 *   old generation's headroom is below the young generation's size, which in
 *   the benchmark meant a full collection every second or two.
 * --min-semi-space-size=32: and never less. V8 shrinks an idle process's young
 *   generation, and a rollout worker idles (between batches, while the trainer
 *   updates); the next calls then ran on a small young generation, scavenged
 *   several times as often, until it had grown again. In the full benchmark,
 *   where the proxy idles while LiteLLM's runs go, 38 pauses per paced run
 *   became 16, as in a run with no idle time.
 * --initial-old-space-size=256: the old generation's first collection limit.
 *   V8 starts at a few MB and grows it collection by collection; the proxy
 *   reaches ~60 MB live within seconds, and every step of the way was a full
 *   collection of 10-30 ms.
 *
 * Paced proxy benchmark, six alternating runs per setting: full collections
 * 4-7 -> 2 per run, longest pause 9-30 -> 8-10 ms, GC time per request
 * 0.06-0.12 -> 0.06 ms, in-hop p99 5.5-5.6 -> 3.6-4.1 ms (docs/benchmarks.md).
 */
export const PROXY_NODE_FLAGS: readonly string[] = ["--max-semi-space-size=32", "--min-semi-space-size=32", "--initial-old-space-size=256"];
