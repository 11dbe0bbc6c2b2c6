/**
 * `pnpm bench:proxy-body [--mb 20] [--rounds 3]`: how long one huge request blocks
 * the proxy's event loop (every session shares it). A `--mb` MB user message is
 * posted to /v1/chat/completions, alternating a proxy that knows the context
 * window (131072, Qwen3's) with one that does not (so it tokenizes the whole
 * body, as before 2026-12-02). The longest event-loop delay during each request
 * comes from `monitorEventLoopDelay`. Last line: one JSON object.
 */
import { monitorEventLoopDelay } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { MODEL_NAME, qwen3, scriptedEngine, startProxy } from "./test-support.ts";

const { values } = parseArgs({ options: { mb: { type: "string", default: "20" }, rounds: { type: "string", default: "3" } } });
const mb = Number(values.mb);
const rounds = Number(values.rounds);

// Code-like lines with numbers: ~3 chars per token, as tool output of source files is.
let content = "";
for (let i = 0; content.length < mb * 1e6; i++) content += `const value_${i % 997} = compute(${i}, "item ${i % 13}");\n`;
const body = JSON.stringify({ model: MODEL_NAME, messages: [{ role: "user", content }] });

async function once(contextWindow: number | null): Promise<{ status: number; total_ms: number; max_delay_ms: number }> {
  const proxy = await startProxy(scriptedEngine(qwen3(), () => ({ text: "ok" })), contextWindow === null ? { model: { ...qwen3(), contextWindow: null } } : { contextWindow }, {});
  try {
    const s = proxy.createSession("big");
    const delay = monitorEventLoopDelay({ resolution: 1 });
    delay.enable();
    const t0 = performance.now();
    const res = await fetch(`${s.baseUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${s.secret}` }, body });
    await res.text();
    const total = performance.now() - t0;
    delay.disable();
    return { status: res.status, total_ms: Math.round(total), max_delay_ms: Math.round(delay.max / 1e6) };
  } finally {
    await proxy.close();
  }
}

await once(131072); // warm-up: the tokenizer's caches and the JIT
const known: number[] = [];
const unknown: number[] = [];
for (let r = 0; r < rounds; r++) {
  const a = await once(null);
  const b = await once(131072);
  console.log(JSON.stringify({ round: r, window_unknown: a, window_131072: b }));
  unknown.push(a.max_delay_ms);
  known.push(b.max_delay_ms);
}
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
console.log(JSON.stringify({ body_mb: Math.round(body.length / 1e5) / 10, rounds, max_delay_ms_window_known_median: median(known), max_delay_ms_window_unknown_median: median(unknown), max_delay_ms_window_known: known, max_delay_ms_window_unknown: unknown }));
