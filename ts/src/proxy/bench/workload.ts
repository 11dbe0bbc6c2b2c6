/**
 * The agent workloads: sessions whose histories grow turn by turn, and the loop
 * that drives them, in two API shapes. `openai`: Chat Completions with tools,
 * tool results as tool messages. `anthropic`: shaped like Claude Code's Messages
 * traffic — system blocks with a cache_control breakpoint, tool_result blocks,
 * tool_use inputs re-serialized with their keys in another order, the cache
 * breakpoint moving to the newest message every turn and a <system-reminder>
 * block on it, so no re-sent body is a byte-identical prefix of the next one.
 */
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

export type Api = "openai" | "anthropic";
export const APIS: readonly Api[] = ["openai", "anthropic"];
const PATHS: Record<Api, string> = { openai: "/v1/chat/completions", anthropic: "/v1/messages" };

const ANTHROPIC_SYSTEM = [
  { type: "text", text: "You are Claude Code, Anthropic's official CLI for Claude." },
  { type: "text", text: SYSTEM, cache_control: { type: "ephemeral" } },
];
const ANTHROPIC_TOOLS = TOOLS.map(({ function: f }) => ({ name: f.name, description: f.description, input_schema: f.parameters }));
type Block = Record<string, unknown>;
type Message = { role: string; content: Block[] };
/** Claude Code echoes tool_use inputs back re-serialized: same values, other key order. */
const reordered = (input: Record<string, unknown>) => Object.fromEntries(Object.entries(input).reverse());

export interface Target {
  name: string;
  /** Base URL for workload session `s` (the proxy gives each session its own URL and secret); the API's path is appended. */
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
export async function drive(target: Target, offset = 0, toolMs = 0, api: Api = "openai"): Promise<Map<string, number>> {
  // Keyed by session and turn: the same key is the same request on every path (see pairedAdded).
  const latencies = new Map<string, number>();
  const turnTokens = TURN_TOKENS;
  await Promise.all(
    Array.from({ length: SESSIONS }, async (_, s) => {
      const session = s + offset;
      const pause = rng(7919 * session + 1);
      if (toolMs > 0) await new Promise((r) => setTimeout(r, (s / SESSIONS) * 2 * toolMs));
      // Same system prompt and tools in every session (one harness); task and tool output differ per
      // session and between the warm-up and the measured run (`offset`), so no text recurs by accident.
      const task = `Task ${session}: ${codeText(200, 1000 + session)}`;
      const conversation = api === "openai" ? openaiConversation(task) : anthropicConversation(task);
      for (let turn = 0, tokens = 2000; tokens < TARGET_TOKENS; turn++, tokens += turnTokens) {
        if (toolMs > 0 && turn > 0) await new Promise((r) => setTimeout(r, pause() * 2 * toolMs));
        // Serialized before the clock starts: the client's own work is not any path's latency.
        const payload = conversation.request();
        const t0 = performance.now();
        const res = await fetch(target.url(session) + PATHS[api], {
          method: "POST",
          headers: { "content-type": "application/json", ...target.headers(session) },
          body: payload,
        });
        const body = (await res.json()) as Record<string, unknown>;
        latencies.set(`${session}/${turn}`, performance.now() - t0);
        if (!res.ok) throw new Error(`${target.name}: HTTP ${res.status} ${JSON.stringify(body).slice(0, 300)}`);
        conversation.reply(body, (what) => new Error(`${target.name}: ${what} in ${JSON.stringify(body).slice(0, 300)}`), codeText(turnTokens, session * 1000 + turn));
      }
    }),
  );
  return latencies;
}

interface Conversation {
  /** The next request's body. */
  request(): string;
  /** Takes the reply into the history, with `toolOutput` as every tool call's result. */
  reply(body: Record<string, unknown>, bad: (what: string) => Error, toolOutput: string): void;
}

function openaiConversation(task: string): Conversation {
  const messages: Array<Record<string, unknown>> = [{ role: "system", content: SYSTEM }, { role: "user", content: task }];
  return {
    request: () => JSON.stringify({ model: "bench", messages, tools: TOOLS, max_tokens: 256 }),
    reply(body, bad, toolOutput) {
      const msg = (body["choices"] as Array<{ message: Record<string, unknown> }> | undefined)?.[0]?.message;
      if (!msg) throw bad("no message");
      const calls = (msg["tool_calls"] ?? []) as Array<{ id: string }>;
      messages.push({ role: "assistant", content: msg["content"] ?? "", tool_calls: calls });
      for (const c of calls) messages.push({ role: "tool", tool_call_id: c.id, content: toolOutput });
    },
  };
}

function anthropicConversation(task: string): Conversation {
  const messages: Message[] = [{ role: "user", content: [{ type: "text", text: task }] }];
  return {
    request() {
      // The breakpoint sits on the newest message's last block only, as Claude Code moves it each turn.
      const sent = messages.map((m, i) => (i === messages.length - 1
        ? { ...m, content: m.content.map((b, j) => (j === m.content.length - 1 ? { ...b, cache_control: { type: "ephemeral" } } : b)) }
        : m));
      return JSON.stringify({ model: "bench", max_tokens: 256, system: ANTHROPIC_SYSTEM, tools: ANTHROPIC_TOOLS, messages: sent, metadata: { user_id: "bench" } });
    },
    reply(body, bad, toolOutput) {
      const content = body["content"] as Block[] | undefined;
      if (!Array.isArray(content)) throw bad("no content");
      const uses = content.filter((b) => b["type"] === "tool_use") as Array<{ id: string; name: string; input: Record<string, unknown> }>;
      messages.push({ role: "assistant", content: content.map((b) => (b["type"] === "tool_use" ? { ...b, input: reordered(b["input"] as Record<string, unknown>) } : b)) });
      if (uses.length === 0) return;
      messages.push({
        role: "user",
        content: [
          ...uses.map((u) => ({ type: "tool_result", tool_use_id: u.id, content: [{ type: "text", text: toolOutput }] })),
          { type: "text", text: "<system-reminder>Keep the todo list current.</system-reminder>" },
        ],
      });
    },
  };
}

