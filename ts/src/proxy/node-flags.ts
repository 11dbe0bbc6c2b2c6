/**
 * V8 flags for a process that hosts the proxy (`lego` sets them on node's
 * command line; the proxy benchmark runs its proxy process with them too).
 *
 * The proxy's heap has two kinds of data: long-lived (the tokenizer, every
 * session's history and records) and per-call state that lives while the
 * engine samples (hundreds of ms). Node 20's defaults collect such a heap
 * badly in both generations:
 *
 * --max-semi-space-size=16 --min-semi-space-size=16: a young generation of
 *   2 x 16 MB from the start and always. V8 starts it at 1 MB and grows it,
 *   and shrinks it again when the process idles (a rollout worker does, between
 *   batches); every call then ran on a small young generation, scavenged several
 *   times as often (in the full benchmark, where the proxy idles while LiteLLM
 *   is measured, 38 pauses per paced run instead of 16, pinned at 32 MB). 16 rather than 32: a
 *   scavenge's pause grows with the young generation (what it copies is mostly
 *   what accumulated since the last one), and as often as pauses come they hold
 *   up calls in flight; five alternating pairs of paced runs, 32 vs 16: scavenge
 *   7.5-8.6 vs 4.9-5.8 ms, in-hop p99 4.35-5.11 vs 4.02-4.54 ms. (64 MB made V8
 *   start incremental marking whenever the old generation's headroom was below
 *   the young generation's size: a full collection every second or two.)
 * --initial-old-space-size=256: the old generation's first collection limit.
 *   V8 starts at a few MB and grows it collection by collection; the proxy
 *   reaches ~60 MB live within seconds, and every step of the way was a full
 *   collection of 10-30 ms.
 *
 *   With it (and a 32 MB young generation instead of 64), six alternating paced
 *   runs per setting: full collections 4-7 -> 2 per run, longest pause 9-30 ->
 *   8-10 ms, in-hop p99 5.5-5.6 -> 3.6-4.1 ms (docs/benchmarks.md, 2026-12-01).
 * --no-concurrent-marking: a full collection marks in small steps on the main
 *   thread as it allocates, instead of on helper threads. Where cores are few
 *   and busy (the proxy shares them with the harnesses it serves) the helpers
 *   got little CPU, and the marking they had not done was finished inside the
 *   collection's final pause: 16 ms of a 26 ms pause in one trace
 *   (--trace-gc-nvp). Seven alternating pairs of paced runs on 2 cores: longest
 *   pause 14-39 -> 7-19 ms, end-to-end added p99 1.2-7.4 -> 0.1-2.2 ms, p50,
 *   in-hop times and CPU per call unchanged (docs/benchmarks.md, 2026-12-02).
 *   V8 refuses it in NODE_OPTIONS, so only the command line can set it.
 */
export const PROXY_NODE_FLAGS: readonly string[] = ["--max-semi-space-size=16", "--min-semi-space-size=16", "--initial-old-space-size=256", "--no-concurrent-marking"];
