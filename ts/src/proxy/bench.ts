/**
 * Benchmark (not a test): added latency of the proxy on agent-sized traffic.
 *
 * 64 concurrent sessions each run a multi-turn tool-calling conversation whose
 * history grows from ~2k to ~30k tokens. The same workload is sent
 *   direct      client -> engine                      (the reference)
 *   passthrough client -> nginx -> engine             (floor: no templating or tokenization)
 *   litellm     client -> LiteLLM proxy -> engine     (when a `litellm` binary is found)
 *   proxy       client -> lego proxy -> engine        (template + tokenize + capture)
 * The engine answers every call with a fixed tool call (OpenAI chat JSON for
 * the token-free paths; in the proxy it is the scripted engine in process, or
 * with --engine vllm a process answering vLLM /v1/completions SSE with ids).
 *
 * Two workloads, each run for every path:
 *   paced         the engine takes a stated time per sampled token
 *                 (--decode-ms-per-token, default 20 ms: a batched decode step
 *                 of a served MoE model; behind the proxy it streams each chunk
 *                 when its last token is due, as the engines the proxy talks to
 *                 do, and answers a direct call when the last one is, so both
 *                 paths get the reply's last token at the same time) and the harness a seeded 0-200 ms
 *                 between calls (--tool-ms 100: running the tool), sessions
 *                 start spread out, so they wait on the engine as in a real
 *                 rollout instead of firing in waves;
 *   back_to_back  the engine answers at once, so 64 sessions fire requests back
 *                 to back and every path runs at CPU saturation (a throughput
 *                 test: added latency there is mostly queueing for the CPU).
 *
 * Figures per path and workload:
 *   end to end  client-observed percentile through the path minus the same
 *               percentile calling the engine directly (what "added latency"
 *               means to a harness), each pooled over --rounds measured runs
 *               in which the paths take turns;
 *   in the hop  for the proxy, wall time inside its request handler minus the
 *               time spent waiting on the engine; for nginx,
 *               $request_time - $upstream_response_time (1 ms resolution);
 *   cpu         proxy process CPU (user + system) and GC pause time per request;
 *   phases      of the proxy's hop: reading the body, and parsing and planning it.
 * The last line's overhead_p50_ms / overhead_p99_ms are the END-TO-END added
 * latency of the PACED workload (`"measure"` says so); vs_passthrough_p50 is
 * that p50 over nginx's end-to-end added p50 (a floor under 1 ms counts as
 * 1 ms); vs_litellm is that p50 over LiteLLM's. Every other figure is kept
 * under "paced" and "back_to_back".
 *
 * Run: pnpm exec tsx src/proxy/bench.ts [--sessions 64] [--target-tokens 30000] [--rounds 3]
 *        [--decode-ms-per-token 20] [--tool-ms 100] [--workloads paced,back_to_back] [--only direct,passthrough,litellm,proxy] [--engine inproc|vllm]
 * The proxy process runs with the V8 flags `lego` uses (node-flags.ts).
 * Profiling the proxy process: BENCH_PROXY_PROFILE_DIR=dir (--cpu-prof), BENCH_PROXY_NODE_FLAGS="--trace-gc".
 * Last stdout line: {"bench":"proxy","measure":...,"overhead_p50_ms",...}.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { PerformanceObserver } from "node:perf_hooks";
import { ScriptedEngine } from "../engine/scripted.ts";
import type { EngineClient } from "../engine/types.ts";
import { VllmEngine } from "../engine/vllm.ts";
import { loadProxyModel } from "./model.ts";
import { PROXY_NODE_FLAGS } from "./node-flags.ts";
import { ProxyServer } from "./server.ts";
import { QWEN3_DIR } from "./test-support.ts";

const SELF = fileURLToPath(import.meta.url);
const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const strArg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : dflt;
};
const SESSIONS = arg("sessions", 64);
/**
 * Measured runs per path. Paths take turns, one run each per round, and each
 * path's samples are pooled over the rounds: a path's percentile minus the
 * direct one's then compares the same stretches of time instead of two
 * 10-second windows minutes apart, on a host whose speed drifts.
 */
const ROUNDS = arg("rounds", 3);
const TARGET_TOKENS = arg("target-tokens", 30_000);
/** Engine time per sampled token in the paced workload. */
const DECODE_MS_PER_TOKEN = arg("decode-ms-per-token", 20);
/** Mean time the harness spends running a tool between two calls in the paced workload (uniform 0..2x). */
const TOOL_MS = arg("tool-ms", 100);
/** ~4 characters per token for this generated text (measured with the Qwen3 tokenizer). */
const CHARS_PER_TOKEN = 3.4;
const REPLY_ARGS = { cmd: "cat src/app.ts", timeout: 30 };
const REPLY_TEXT = `<tool_call>\n${JSON.stringify({ name: "run", arguments: REPLY_ARGS })}\n</tool_call>`;

// ------------------------------------------------------------------ workload
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

interface Target {
  name: string;
  /** Endpoint for workload session `s` (the proxy gives each session its own URL and secret). */
  url: (s: number) => string;
  headers: (s: number) => Record<string, string>;
}

/** Tokens each tool result adds: histories grow from ~2k to TARGET_TOKENS in 14 turns. */
const TURN_TOKENS = Math.ceil((TARGET_TOKENS - 2000) / 14);
function turnsPerSession(): number {
  let n = 0;
  for (let tokens = 2000; tokens < TARGET_TOKENS; tokens += TURN_TOKENS) n++;
  return n;
}

interface ProxyStats {
  /** Per measured request: wall time inside the proxy minus the engine's share (ms). */
  added: number[];
  /** Per measured request: reading the body, and parsing and planning it (RequestEnd). */
  body_ms: number[];
  plan_ms: number[];
  /** Proxy process CPU (user + system) over the measured run, per request. */
  cpu_ms_per_request: number;
  /** Of which in the kernel (socket reads and writes). */
  cpu_system_ms_per_request: number;
  gc_ms_per_request: number;
  gc_max_ms: number;
  gc_count: number;
}

/**
 * Runs all sessions concurrently against `target`; returns per-request latencies (ms).
 * `offset` gives the warm-up run its own sessions and texts. With `toolMs` > 0 (the paced
 * workload) sessions start spread over `toolMs` and pause a seeded 0..2*toolMs between calls
 * (the harness running the tool), so they do not fire in lock-step waves.
 */
async function drive(target: Target, offset = 0, toolMs = 0): Promise<number[]> {
  const latencies: number[] = [];
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
        latencies.push(performance.now() - t0);
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

// ------------------------------------------------------------------ engine role
/** The engine process; `decodeMs` per sampled token is waited before answering (the paced workload). */
async function engineRole(decodeMs: number): Promise<void> {
  const model = loadProxyModel(QWEN3_DIR);
  const ids = [...model.tokenizer.encode(REPLY_TEXT), model.codec.endOfTurnId];
  const decode = () => (decodeMs > 0 ? new Promise((r) => setTimeout(r, decodeMs * ids.length)) : null);
  let n = 0;
  const readBody = (req: IncomingMessage) =>
    new Promise<string>((resolve) => {
      const parts: Buffer[] = [];
      req.on("data", (d: Buffer) => parts.push(d)).on("end", () => resolve(Buffer.concat(parts).toString()));
    });
  const server = createServer(async (req, res) => {
    if (req.method !== "POST") return void res.writeHead(200, { "content-length": 0 }).end();
    await readBody(req);
    await decode();
    if (req.url === "/v1/completions") {
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (let i = 0; i < ids.length; i += 4) {
        const part = ids.slice(i, i + 4);
        const choice = { index: 0, text: "", logprobs: { tokens: part.map((t) => `token_id:${t}`), token_logprobs: part.map(() => -0.5) }, finish_reason: i + 4 >= ids.length ? "stop" : null };
        res.write(`data: ${JSON.stringify({ id: "c", choices: [choice] })}\n\n`);
      }
      res.end("data: [DONE]\n\n");
      return;
    }
    const text = JSON.stringify({
      id: `chatcmpl-${n}`,
      object: "chat.completion",
      created: 0,
      model: "bench",
      choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [{ id: `call_${n++}`, type: "function", function: { name: "run", arguments: JSON.stringify(REPLY_ARGS) } }] }, finish_reason: "tool_calls" }],
      usage: { prompt_tokens: 0, completion_tokens: ids.length, total_tokens: ids.length },
    });
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) }).end(text);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  console.log(JSON.stringify({ port: (server.address() as AddressInfo).port }));
}

// ------------------------------------------------------------------ proxy role
/** `inner`, telling `done` how long each call spent waiting on it (sum of the waits for its next chunk). */
function timedEngine(inner: EngineClient, done: (requestId: string, ms: number) => void): EngineClient {
  return {
    name: inner.name,
    close: () => inner.close(),
    async *generate(req, signal) {
      const it = inner.generate(req, signal)[Symbol.asyncIterator]();
      let waited = 0;
      try {
        for (;;) {
          const t0 = performance.now();
          const next = await it.next();
          waited += performance.now() - t0;
          if (next.done) return;
          yield next.value;
        }
      } finally {
        done(req.request_id, waited);
      }
    },
  };
}
/**
 * The proxy with the scripted engine in its own process (`--engine inproc`,
 * the default: nothing but the proxy's own work is measured) or with the
 * engine process behind HTTP in vLLM's format (`--engine vllm`). Records, per
 * request, the wall time inside the proxy minus the engine's share, and writes
 * them to --stats-out when terminated.
 */
async function proxyRole(enginePort: number, engineKind: string, statsOut: string, decodeMs: number): Promise<void> {
  const model = loadProxyModel(QWEN3_DIR);
  const engineMs = new Map<string, number>();
  const inner =
    engineKind === "vllm"
      ? new VllmEngine({ baseUrl: `http://127.0.0.1:${enginePort}`, model: "bench" })
      : new ScriptedEngine({ script: () => ({ text: REPLY_TEXT }), encode: (t) => model.tokenizer.encode(t), endOfTurnId: model.codec.endOfTurnId, chunkSize: 4, recordPrompts: false, decodeMsPerToken: decodeMs });
  // The engine's share of a request: the time its stream kept the proxy waiting (keyed by session; one call in flight per session).
  const engine = timedEngine(inner, (requestId, ms) => engineMs.set(requestId.slice(0, requestId.lastIndexOf("/turn-")), ms));
  const added: number[] = [];
  const bodyMs: number[] = [];
  const planMs: number[] = [];
  // CPU time and GC pauses of the proxy process while the driver runs a measured
  // proxy run (it says "measure" and "pause" on stdin): between those runs the
  // process idles while other paths are measured, and V8 collects then too.
  const turns = turnsPerSession();
  const callsBySession = new Map<string, number>();
  let measuring = false;
  let cpuFrom: NodeJS.CpuUsage | null = null;
  const cpu = { user: 0, system: 0 };
  let gcMs = 0;
  let gcMaxMs = 0;
  let gcCount = 0;
  const gc = new PerformanceObserver((list) => {
    if (!measuring) return;
    for (const e of list.getEntries()) {
      gcMs += e.duration;
      gcMaxMs = Math.max(gcMaxMs, e.duration);
      gcCount++;
    }
  });
  gc.observe({ entryTypes: ["gc"] });
  createInterface({ input: process.stdin }).on("line", (line) => {
    if (line === "measure") {
      measuring = true;
      cpuFrom = process.cpuUsage();
    } else if (line === "pause" && cpuFrom) {
      const d = process.cpuUsage(cpuFrom);
      cpu.user += d.user;
      cpu.system += d.system;
      measuring = false;
      cpuFrom = null;
    }
    console.log(JSON.stringify({ ack: line }));
  });
  const proxy = await ProxyServer.start({
    model,
    engine,
    servedModels: ["bench"],
    onRequestEnd: (e) => {
      if (measuring) {
        added.push(e.duration_ms - (engineMs.get(e.session_id ?? "") ?? 0));
        bodyMs.push(e.body_ms);
        planMs.push(e.plan_ms);
      }
      // A rollout worker closes a session when its agent is done and ships the records;
      // sessions left open would pile up histories and segments the real proxy does not keep.
      const id = e.session_id;
      if (id !== null) {
        const calls = (callsBySession.get(id) ?? 0) + 1;
        callsBySession.set(id, calls);
        if (calls === turns) setImmediate(() => proxy.closeSession(id));
      }
    },
  });
  // A warm-up run, then one run per round (a session's history only grows).
  const sessions = Array.from({ length: (ROUNDS + 1) * SESSIONS }, (_, i) => proxy.createSession(`b${i}`));
  process.once("SIGTERM", () => {
    const measured = added.length;
    const stats: ProxyStats = {
      added,
      body_ms: bodyMs,
      plan_ms: planMs,
      cpu_ms_per_request: Number(((cpu.user + cpu.system) / 1000 / measured).toFixed(3)),
      cpu_system_ms_per_request: Number((cpu.system / 1000 / measured).toFixed(3)),
      gc_ms_per_request: Number((gcMs / measured).toFixed(3)),
      gc_max_ms: Number(gcMaxMs.toFixed(2)),
      gc_count: gcCount,
    };
    writeFileSync(statsOut, JSON.stringify(stats));
    process.exit(0);
  });
  console.log(JSON.stringify({ sessions: sessions.map((s) => ({ url: `${s.baseUrl}/v1/chat/completions`, secret: s.secret })) }));
}

// ------------------------------------------------------------------ driver
interface Child {
  proc: ChildProcess;
  firstLine: Promise<string>;
  /** Writes `command` to the child's stdin and waits for its next JSON line (its answer). */
  ask(command: string): Promise<string>;
}

function child(cmd: string, args: string[], env: Record<string, string> = {}): Child {
  const proc = spawn(cmd, args, { stdio: ["pipe", "pipe", "inherit"], env: { ...process.env, ...env } });
  const lines = createInterface({ input: proc.stdout! });
  const waiting: Array<(line: string) => void> = [];
  // The first line that is JSON is the child's report, later ones answer ask(); anything else (--trace-gc output) goes to stderr.
  const firstLine = new Promise<string>((resolve, reject) => {
    let reported = false;
    lines.on("line", (line) => {
      if (!reported && line.startsWith("{")) {
        reported = true;
        resolve(line);
      } else if (line.startsWith("{") && waiting.length > 0) waiting.shift()!(line);
      else process.stderr.write(line + "\n");
    });
    proc.once("exit", (code) => reject(new Error(`${cmd} exited with ${code} before reporting`)));
  });
  const ask = (command: string) =>
    new Promise<string>((resolve) => {
      waiting.push(resolve);
      proc.stdin!.write(command + "\n");
    });
  return { proc, firstLine, ask };
}

/** Polls until `url` answers (a benchmark helper for third-party servers that print no ready line). */
async function waitUp(url: string, seconds: number): Promise<boolean> {
  const until = Date.now() + seconds * 1000;
  while (Date.now() < until) {
    const ok = await fetch(url).then((r) => r.status < 500, () => false);
    if (ok) return true;
    await new Promise((r) => setTimeout(r, 250));
  }
  return false;
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

async function startNginx(enginePort: number): Promise<{ proc: ChildProcess; url: string; log: string } | null> {
  if (spawnSync("nginx", ["-v"]).status !== 0) return null;
  const dir = mkdtempSync(join(tmpdir(), "bench-nginx-"));
  const port = await freePort();
  writeFileSync(
    join(dir, "nginx.conf"),
    `daemon off; worker_processes 1; pid ${dir}/nginx.pid; error_log ${dir}/error.log;
events { worker_connections 4096; }
http {
  log_format hop '$request_time $upstream_response_time';
  access_log ${dir}/hop.log hop; client_max_body_size 64m; client_body_buffer_size 2m; proxy_buffering off;
  client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy; fastcgi_temp_path ${dir}/fcgi; uwsgi_temp_path ${dir}/uwsgi; scgi_temp_path ${dir}/scgi;
  upstream engine { server 127.0.0.1:${enginePort}; keepalive 128; }
  server { listen 127.0.0.1:${port}; location / { proxy_pass http://engine; proxy_http_version 1.1; proxy_set_header Connection ""; } }
}
`,
  );
  const proc = spawn("nginx", ["-p", dir, "-c", join(dir, "nginx.conf")], { stdio: "ignore" });
  if (!(await waitUp(`http://127.0.0.1:${port}/`, 20))) {
    proc.kill();
    return null;
  }
  return { proc, url: `http://127.0.0.1:${port}/v1/chat/completions`, log: join(dir, "hop.log") };
}

/** nginx's own share of each request: $request_time - $upstream_response_time (ms; nginx logs with 1 ms resolution). */
function nginxAdded(log: string, skip: number): number[] {
  return readFileSync(log, "utf8")
    .trim()
    .split("\n")
    .slice(skip)
    .map((line) => {
      const [total, upstream] = line.split(" ").map(Number);
      return (total! - upstream!) * 1000;
    });
}

async function startLitellm(enginePort: number): Promise<{ proc: ChildProcess; url: string } | null> {
  const bin = process.env["LITELLM_BIN"] ?? (existsSync("/tmp/litellm-venv/bin/litellm") ? "/tmp/litellm-venv/bin/litellm" : "litellm");
  const env = { ...process.env, LITELLM_LOCAL_MODEL_COST_MAP: "True", LITELLM_LOG: "ERROR", LITELLM_MASTER_KEY: "sk-bench" };
  if (spawnSync(bin, ["--version"], { timeout: 60_000, env }).status !== 0) return null;
  const dir = mkdtempSync(join(tmpdir(), "bench-litellm-"));
  const port = await freePort();
  writeFileSync(join(dir, "config.yaml"), `model_list:\n  - model_name: bench\n    litellm_params:\n      model: openai/bench\n      api_base: http://127.0.0.1:${enginePort}/v1\n      api_key: none\n`);
  const proc = spawn(bin, ["--config", join(dir, "config.yaml"), "--port", String(port), "--host", "127.0.0.1", "--num_workers", "1"], { stdio: "ignore", env });
  if (!(await waitUp(`http://127.0.0.1:${port}/health/liveliness`, 120))) {
    proc.kill();
    return null;
  }
  return { proc, url: `http://127.0.0.1:${port}/v1/chat/completions` };
}

interface WorkloadResult {
  decode_ms_per_token: number;
  tool_ms: number;
  /** Client-observed added latency: the path's percentile minus calling the engine directly. */
  e2e_added_p50_ms: Record<string, number | null>;
  e2e_added_p99_ms: Record<string, number | null>;
  /** Inside the hop (proxy: handler wall time minus engine waits; nginx: from its log). */
  in_hop_p50_ms: Record<string, number | null>;
  in_hop_p99_ms: Record<string, number | null>;
  direct_p50_ms: number | null;
  proxy_cpu_ms_per_request: number | null;
  proxy_cpu_system_ms_per_request: number | null;
  proxy_gc_ms_per_request: number | null;
  proxy_gc_max_ms: number | null;
  /** p50 and p99 of two phases inside the hop: reading the body, and parsing and planning it. */
  proxy_phases_ms: { body_read: [number, number]; plan: [number, number] } | null;
}

const round = (x: number | null) => (x === null ? null : Number(x.toFixed(3)));

/** Runs every wanted path against an engine that waits `decodeMs` per sampled token. */
async function workload(label: string, decodeMs: number, toolMs: number, engineKind: string, want: (name: string) => boolean): Promise<WorkloadResult> {
  const tsx = ["--import", "tsx", SELF];
  console.log(`--- ${label}: engine ${decodeMs} ms per sampled token, tool time ${toolMs} ms on average`);
  const engine = child(process.execPath, [...tsx, "--role", "engine", "--sessions", String(SESSIONS), "--decode-ms-per-token", String(decodeMs)]);
  const enginePort = (JSON.parse(await engine.firstLine) as { port: number }).port;
  const procs: ChildProcess[] = [engine.proc];
  const e2e: Record<string, number[]> = {};
  const hop: Record<string, number[]> = {};
  let proxyStats: ProxyStats | null = null;
  const fixed = (url: string, headers: Record<string, string> = {}) => ({ url: () => url, headers: () => headers });
  const targets: Target[] = [];
  let nginx: Awaited<ReturnType<typeof startNginx>> = null;
  let proxyProc: Child | null = null;
  let stats = "";
  try {
    if (want("direct")) targets.push({ name: "direct", ...fixed(`http://127.0.0.1:${enginePort}/v1/chat/completions`) });
    nginx = want("passthrough") ? await startNginx(enginePort) : null;
    if (nginx) {
      procs.push(nginx.proc);
      targets.push({ name: "passthrough", ...fixed(nginx.url) });
    } else if (want("passthrough")) console.log("passthrough: nginx not found (apt-get install nginx-light)");
    const litellm = want("litellm") ? await startLitellm(enginePort) : null;
    if (litellm) {
      procs.push(litellm.proc);
      targets.push({ name: "litellm", ...fixed(litellm.url, { authorization: "Bearer sk-bench" }) });
    } else if (want("litellm")) console.log("litellm: not available (pip install 'litellm[proxy]' or set LITELLM_BIN)");
    if (want("proxy")) {
      stats = join(mkdtempSync(join(tmpdir(), "bench-proxy-")), "added.json");
      const prof = process.env["BENCH_PROXY_PROFILE_DIR"] ? ["--cpu-prof", `--cpu-prof-dir=${process.env["BENCH_PROXY_PROFILE_DIR"]}`] : [];
      // The flags `lego` runs the proxy with, then extra ones for this process only, e.g. BENCH_PROXY_NODE_FLAGS="--trace-gc".
      prof.push(...PROXY_NODE_FLAGS, ...(process.env["BENCH_PROXY_NODE_FLAGS"] ?? "").split(" ").filter(Boolean));
      const p = child(process.execPath, [...prof, ...tsx, "--role", "proxy", "--engine", engineKind, "--engine-port", String(enginePort), "--sessions", String(SESSIONS), "--rounds", String(ROUNDS), "--stats-out", stats, "--decode-ms-per-token", String(decodeMs)]);
      procs.push(p.proc);
      proxyProc = p;
      const { sessions } = JSON.parse(await p.firstLine) as { sessions: Array<{ url: string; secret: string }> };
      targets.push({ name: "proxy", url: (s) => sessions[s]!.url, headers: (s) => ({ authorization: `Bearer ${sessions[s]!.secret}` }) });
    }
    // Sessions 0..SESSIONS-1 warm every path up; round r uses sessions r*SESSIONS.. (new texts, and new proxy sessions).
    for (const t of targets) await drive(t, 0, toolMs);
    for (let round = 1; round <= ROUNDS; round++)
      for (const t of targets) {
        if (t.name === "proxy") await proxyProc!.ask("measure");
        const lat = await drive(t, round * SESSIONS, toolMs);
        if (t.name === "proxy") await proxyProc!.ask("pause");
        (e2e[t.name] ??= []).push(...lat);
        console.log(`${t.name.padEnd(12)} round ${round} end-to-end n=${lat.length} p50=${pct(lat, 50).toFixed(2)}ms p99=${pct(lat, 99).toFixed(2)}ms`);
      }
    for (const t of targets) console.log(`${t.name.padEnd(12)} all rounds end-to-end n=${e2e[t.name]!.length} p50=${pct(e2e[t.name]!, 50).toFixed(2)}ms p99=${pct(e2e[t.name]!, 99).toFixed(2)}ms`);
    if (nginx) hop["passthrough"] = nginxAdded(nginx.log, SESSIONS * turnsPerSession());
    if (proxyProc) {
      const exited = new Promise((r) => proxyProc!.proc.once("exit", r));
      proxyProc.proc.kill("SIGTERM");
      await exited;
      proxyStats = JSON.parse(readFileSync(stats, "utf8")) as ProxyStats;
      hop["proxy"] = proxyStats.added;
      console.log(`proxy        cpu ${proxyStats.cpu_ms_per_request} ms/request (system ${proxyStats.cpu_system_ms_per_request}), gc ${proxyStats.gc_ms_per_request} ms/request (${proxyStats.gc_count} pauses, longest ${proxyStats.gc_max_ms} ms)`);
    }
  } finally {
    for (const p of procs) p.kill();
  }
  for (const [name, xs] of Object.entries(hop)) console.log(`${name.padEnd(12)} inside the hop p50=${pct(xs, 50).toFixed(2)}ms p99=${pct(xs, 99).toFixed(2)}ms`);
  if (proxyStats)
    console.log(`proxy        of which reading the body p50=${pct(proxyStats.body_ms, 50).toFixed(2)}ms p99=${pct(proxyStats.body_ms, 99).toFixed(2)}ms, parsing and planning p50=${pct(proxyStats.plan_ms, 50).toFixed(2)}ms p99=${pct(proxyStats.plan_ms, 99).toFixed(2)}ms`);
  const q = (xs: number[] | undefined, p: number) => (xs && xs.length ? pct(xs, p) : null);
  const e2eAdded = (name: string, p: number) => (e2e[name] && e2e["direct"] ? q(e2e[name], p)! - q(e2e["direct"], p)! : null);
  const paths = ["proxy", "passthrough", "litellm"];
  const per = (f: (name: string) => number | null) => Object.fromEntries(paths.map((n) => [n, round(f(n))]));
  const result: WorkloadResult = {
    decode_ms_per_token: decodeMs,
    tool_ms: toolMs,
    e2e_added_p50_ms: per((n) => e2eAdded(n, 50)),
    e2e_added_p99_ms: per((n) => e2eAdded(n, 99)),
    in_hop_p50_ms: { proxy: round(q(hop["proxy"], 50)), passthrough: round(q(hop["passthrough"], 50)) },
    in_hop_p99_ms: { proxy: round(q(hop["proxy"], 99)), passthrough: round(q(hop["passthrough"], 99)) },
    direct_p50_ms: round(q(e2e["direct"], 50)),
    proxy_cpu_ms_per_request: proxyStats?.cpu_ms_per_request ?? null,
    proxy_cpu_system_ms_per_request: proxyStats?.cpu_system_ms_per_request ?? null,
    proxy_gc_ms_per_request: proxyStats?.gc_ms_per_request ?? null,
    proxy_gc_max_ms: proxyStats?.gc_max_ms ?? null,
    proxy_phases_ms: proxyStats
      ? { body_read: [round(pct(proxyStats.body_ms, 50))!, round(pct(proxyStats.body_ms, 99))!], plan: [round(pct(proxyStats.plan_ms, 50))!, round(pct(proxyStats.plan_ms, 99))!] }
      : null,
  };
  console.log(`${label.padEnd(12)} end-to-end added p50/p99: ${paths.map((n) => `${n} ${result.e2e_added_p50_ms[n]}/${result.e2e_added_p99_ms[n]} ms`).join(", ")}`);
  return result;
}

async function driver(): Promise<void> {
  const engineKind = strArg("engine", "inproc");
  const only = process.argv.includes("--only") ? strArg("only", "").split(",") : null;
  const want = (name: string) => !only || only.includes(name);
  const workloads = strArg("workloads", "paced,back_to_back").split(",");
  const results: Record<string, WorkloadResult> = {};
  for (const w of workloads) {
    if (w !== "paced" && w !== "back_to_back") throw new Error(`unknown workload ${w}`);
    results[w] = await workload(w, w === "paced" ? DECODE_MS_PER_TOKEN : 0, w === "paced" ? TOOL_MS : 0, engineKind, want);
  }
  const head = results["paced"] ?? results["back_to_back"]!;
  const measure = results["paced"] ? "end_to_end_added_paced" : "end_to_end_added_back_to_back";
  const ratio = (a: number | null | undefined, b: number | null | undefined) => (a == null || b == null || b <= 0 ? null : Number((a / b).toPrecision(3)));
  const floor = head.e2e_added_p50_ms["passthrough"];
  console.log(
    JSON.stringify({
      bench: "proxy",
      measure,
      sessions: SESSIONS,
      target_tokens: TARGET_TOKENS,
      engine: engineKind,
      overhead_p50_ms: head.e2e_added_p50_ms["proxy"],
      overhead_p99_ms: head.e2e_added_p99_ms["proxy"],
      vs_passthrough_p50: ratio(head.e2e_added_p50_ms["proxy"], floor == null ? null : Math.max(floor, 1)),
      vs_litellm: ratio(head.e2e_added_p50_ms["proxy"], head.e2e_added_p50_ms["litellm"]),
      ...results,
    }),
  );
}

const role = process.argv[process.argv.indexOf("--role") + 1];
if (process.argv.includes("--role") && role === "engine") await engineRole(arg("decode-ms-per-token", 0));
else if (process.argv.includes("--role") && role === "proxy") await proxyRole(arg("engine-port", 0), strArg("engine", "inproc"), strArg("stats-out", ""), arg("decode-ms-per-token", 0));
else if (process.argv.includes("--role") && role === "driver") await driver();
else {
  // The driver is the measuring instrument for every path: its own GC pauses (it
  // serialises each session's growing history per call and parses every reply)
  // land on whichever path it is timing. It runs as a child with the same heap
  // settings as the proxy, so they are rarer and shorter on both sides of the difference.
  const args = [...PROXY_NODE_FLAGS, "--import", "tsx", SELF, ...process.argv.slice(2), "--role", "driver"];
  const code = await new Promise<number>((resolve) => spawn(process.execPath, args, { stdio: "inherit" }).once("exit", (c) => resolve(c ?? 1)));
  process.exit(code);
}
