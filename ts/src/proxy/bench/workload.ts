/** The OpenAI-shaped agent workload: sessions whose histories grow turn by turn, and the loop that drives them. */
import { CHARS_PER_TOKEN, SESSIONS, TARGET_TOKENS } from "./args.ts";

const WORDS = "const let return await async function import export from class interface type error value result data file path config user test expect if else for while try catch throw new this null undefined true false string number object array map filter reduce push pop length index key console log".split(" ");
function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}
function codeText(tokens: number, seed: number): string {
  const r = rng(seed);
  const out: string[] = [];
  let chars = 0;
  while (chars < tokens * CHARS_PER_TOKEN) {
    const line = Array.from({ length: 3 + Math.floor(r() * 8) }, () => WORDS[Math.floor(r() * WORDS.length)]!).join(" ") + (r() < 0.5 ? ";" : " {");
    out.push("  ".repeat(Math.floor(r() * 3)) + line);
    chars += line.length + 1;
  }
  return out.join("\n");
}
const SYSTEM = `You are a coding agent working in a repository.\n${codeText(1500, 7)}`;
const TOOLS = ["run", "read", "edit", "write"].map((name) => ({
  type: "function",
  function: { name, description: `${name} ${codeText(30, name.length)}`, parameters: { type: "object", properties: { cmd: { type: "string" }, timeout: { type: "number" } }, required: ["cmd"] } },
}));

export interface Target {
  name: string;
  /** Endpoint for workload session `s` (the proxy gives each session its own URL and secret). */
  url: (s: number) => string;
  headers: (s: number) => Record<string, string>;
}

/** Tokens each tool result adds: histories grow from ~2k to TARGET_TOKENS in 14 turns. */
const TURN_TOKENS = Math.ceil((TARGET_TOKENS - 2000) / 14);
export function turnsPerSession(): number {
  let n = 0;
  for (let tokens = 2000; tokens < TARGET_TOKENS; tokens += TURN_TOKENS) n++;
  return n;
}

/**
 * Runs all sessions concurrently against `target`; returns per-request latencies (ms) by "session/turn".
 * `offset` gives the warm-up run its own sessions and texts. With `toolMs` > 0 (the paced
 * workload) sessions start spread over `toolMs` and pause a seeded 0..2*toolMs between calls
 * (the harness running the tool), so they do not fire in lock-step waves.
 */
export async function drive(target: Target, offset = 0, toolMs = 0): Promise<Map<string, number>> {
  // Keyed by session and turn: the same key is the same request on every path (see pairedAdded).
  const latencies = new Map<string, number>();
  const turnTokens = TURN_TOKENS;
  await Promise.all(
    Array.from({ length: SESSIONS }, async (_, s) => {
      const pause = rng(7919 * (s + offset) + 1);
      if (toolMs > 0) await new Promise((r) => setTimeout(r, (s / SESSIONS) * 2 * toolMs));
      const messages: Array<Record<string, unknown>> = [
        { role: "system", content: SYSTEM },
        // Same system prompt and tools in every session (one harness); task and tool output differ per
        // session and between the warm-up and the measured run (`offset`), so no text recurs by accident.
        { role: "user", content: `Task ${s + offset}: ${codeText(200, 1000 + s + offset)}` },
      ];
      for (let turn = 0, tokens = 2000; tokens < TARGET_TOKENS; turn++, tokens += turnTokens) {
        if (toolMs > 0 && turn > 0) await new Promise((r) => setTimeout(r, pause() * 2 * toolMs));
        // Serialized before the clock starts: the client's own work is not any path's latency.
        const payload = JSON.stringify({ model: "bench", messages, tools: TOOLS, max_tokens: 256 });
        const t0 = performance.now();
        const res = await fetch(target.url(s + offset), {
          method: "POST",
          headers: { "content-type": "application/json", ...target.headers(s + offset) },
          body: payload,
        });
        const body = (await res.json()) as { choices?: Array<{ message: Record<string, unknown> }> };
        latencies.set(`${s + offset}/${turn}`, performance.now() - t0);
        const msg = body.choices?.[0]?.message;
        if (!res.ok || !msg) throw new Error(`${target.name}: HTTP ${res.status} ${JSON.stringify(body).slice(0, 300)}`);
        const calls = (msg["tool_calls"] ?? []) as Array<{ id: string }>;
        messages.push({ role: "assistant", content: msg["content"] ?? "", tool_calls: calls });
        for (const c of calls) messages.push({ role: "tool", tool_call_id: c.id, content: codeText(turnTokens, (s + offset) * 1000 + turn) });
      }
    }),
  );
  return latencies;
}

