/**
 * The agent workloads: sessions whose histories grow turn by turn, and the loop
 * that drives them, in two API shapes. `openai`: Chat Completions with tools,
 * tool results as tool messages. `anthropic`: shaped like Claude Code's Messages
 * traffic — system blocks with a cache_control breakpoint, tool_result blocks,
 * tool_use inputs re-serialized with their keys in another order, the cache
 * breakpoint moving to the newest message every turn and a <system-reminder>
 * block on it, so no re-sent body is a byte-identical prefix of the next one.
 */
import { Agent, request } from "node:http";
import { CHARS_PER_TOKEN, SESSIONS, TARGET_TOKENS } from "./args.ts";
import { wallMs, type DriverSpan } from "./stats.ts";

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
 * (the harness running the tool), so they do not fire in lock-step waves. Given `spans`, each
 * request's start and the arrival of its reply's last byte, on the wall clock, go there too (by
 * the same key, which every request also carries as `x-bench-request` for the engine's record).
 */
export async function drive(target: Target, offset = 0, toolMs = 0, api: Api = "openai", spans?: Map<string, DriverSpan>): Promise<Map<string, number>> {
  // Keyed by session and turn: the same key is the same request on every path (see pairedAdded).
  const latencies = new Map<string, number>();
  // One keep-alive connection per session, as a harness holds one to its base URL.
  const agent = new Agent({ keepAlive: true, maxSockets: SESSIONS });
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
        const payload = Buffer.from(conversation.request());
        const key = `${session}/${turn}`;
        const start = wallMs();
        const t0 = performance.now();
        const res = await post(target.url(session) + PATHS[api], { "content-type": "application/json", "x-bench-request": key, ...target.headers(session) }, payload, agent);
        const arrived = performance.now();
        const body = JSON.parse(res.text) as Record<string, unknown>;
        latencies.set(key, performance.now() - t0);
        spans?.set(key, { start, end: start + (arrived - t0) });
        if (res.status !== 200) throw new Error(`${target.name}: HTTP ${res.status} ${res.text.slice(0, 300)}`);
        conversation.reply(body, (what) => new Error(`${target.name}: ${what} in ${JSON.stringify(body).slice(0, 300)}`), codeText(turnTokens, session * 1000 + turn));
      }
    }),
  );
  agent.destroy();
  return latencies;
}

/**
 * One POST with node:http on a keep-alive agent. The driver is the instrument for every
 * path: `fetch` (undici) spent ~0.1-0.2 ms of CPU and several allocations per call, and
 * while it ran for one session another's reply waited in the driver's event loop.
 */
function post(url: string, headers: Record<string, string>, body: Buffer, agent: Agent): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", agent, headers: { ...headers, "content-length": String(body.length) } }, (res) => {
      const parts: Buffer[] = [];
      res.on("data", (d: Buffer) => parts.push(d)).on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(parts).toString() })).on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

export interface Conversation {
  /** The next request's body. */
  request(): string;
  /** Takes the reply into the history, with `toolOutput` as every tool call's result. */
  reply(body: Record<string, unknown>, bad: (what: string) => Error, toolOutput: string): void;
}

/**
 * The body's JSON, each message serialized once: re-serializing a 100 KB history per call
 * blocked the driver's event loop while other sessions' replies waited to be timed.
 */
export class MessagesJson {
  private readonly parts: string[] = [];
  push(message: unknown): void {
    this.parts.push(JSON.stringify(message));
  }
  /** `{"model":...,"messages":[...],<rest>}` with `last`, if given, serialized as the final message. */
  body(head: Record<string, unknown>, rest: Record<string, unknown>, last?: unknown): string {
    const messages = last === undefined ? this.parts : [...this.parts, JSON.stringify(last)];
    return `${JSON.stringify(head).slice(0, -1)},"messages":[${messages.join(",")}],${JSON.stringify(rest).slice(1)}`;
  }
}

export function openaiConversation(task: string): Conversation {
  const messages = new MessagesJson();
  messages.push({ role: "system", content: SYSTEM });
  messages.push({ role: "user", content: task });
  return {
    request: () => messages.body({ model: "bench" }, { tools: TOOLS, max_tokens: 256 }),
    reply(body, bad, toolOutput) {
      const msg = (body["choices"] as Array<{ message: Record<string, unknown> }> | undefined)?.[0]?.message;
      if (!msg) throw bad("no message");
      const calls = (msg["tool_calls"] ?? []) as Array<{ id: string }>;
      messages.push({ role: "assistant", content: msg["content"] ?? "", tool_calls: calls });
      for (const c of calls) messages.push({ role: "tool", tool_call_id: c.id, content: toolOutput });
    },
  };
}

export function anthropicConversation(task: string): Conversation {
  // All but the newest message, serialized once; the newest goes out with the breakpoint.
  const older = new MessagesJson();
  let newest: Message = { role: "user", content: [{ type: "text", text: task }] };
  const push = (m: Message) => {
    older.push(newest);
    newest = m;
  };
  return {
    request() {
      // The breakpoint sits on the newest message's last block only, as Claude Code moves it each turn.
      const last = { ...newest, content: newest.content.map((b, j) => (j === newest.content.length - 1 ? { ...b, cache_control: { type: "ephemeral" } } : b)) };
      return older.body({ model: "bench", max_tokens: 256, system: ANTHROPIC_SYSTEM, tools: ANTHROPIC_TOOLS }, { metadata: { user_id: "bench" } }, last);
    },
    reply(body, bad, toolOutput) {
      const content = body["content"] as Block[] | undefined;
      if (!Array.isArray(content)) throw bad("no content");
      const uses = content.filter((b) => b["type"] === "tool_use") as Array<{ id: string; name: string; input: Record<string, unknown> }>;
      push({ role: "assistant", content: content.map((b) => (b["type"] === "tool_use" ? { ...b, input: reordered(b["input"] as Record<string, unknown>) } : b)) });
      if (uses.length === 0) return;
      push({
        role: "user",
        content: [
          ...uses.map((u) => ({ type: "tool_result", tool_use_id: u.id, content: [{ type: "text", text: toolOutput }] })),
          { type: "text", text: "<system-reminder>Keep the todo list current.</system-reminder>" },
        ],
      });
    },
  };
}
