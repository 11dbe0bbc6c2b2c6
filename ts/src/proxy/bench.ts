/**
 * Benchmark (not a test): added latency of the proxy on agent-sized traffic.
 *
 * 64 concurrent sessions each run a multi-turn tool-calling conversation whose
 * history grows from ~2k to ~30k tokens. The same workload is sent
 *   direct      client -> engine                      (the reference)
 *   passthrough client -> nginx -> engine             (floor: no templating or tokenization)
 *   litellm     client -> LiteLLM proxy -> engine     (when a `litellm` binary is found)
 *   proxy       client -> lego proxy -> engine        (template + tokenize + capture; engine over HTTP, vLLM format)
 * The engine is a separate process answering instantly with a fixed tool call
 * (OpenAI chat JSON for the token-free paths, vLLM /v1/completions SSE with
 * token ids for the proxy). Added latency = a path's percentile - direct's.
 *
 * Run: pnpm exec tsx src/proxy/bench.ts [--sessions 64] [--target-tokens 30000]
 * Last stdout line: {"bench":"proxy","overhead_p50_ms",...}.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { ScriptedEngine } from "../engine/scripted.ts";
import { VllmEngine } from "../engine/vllm.ts";
import { loadProxyModel } from "./model.ts";
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
const TARGET_TOKENS = arg("target-tokens", 30_000);
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

/** Runs all sessions concurrently against `target`; returns per-request latencies (ms). `offset` picks fresh proxy sessions for a second run. */
async function drive(target: Target, offset = 0): Promise<number[]> {
  const latencies: number[] = [];
  const turnTokens = Math.ceil((TARGET_TOKENS - 2000) / 14);
  await Promise.all(
    Array.from({ length: SESSIONS }, async (_, s) => {
      const messages: Array<Record<string, unknown>> = [
        { role: "system", content: SYSTEM },
        { role: "user", content: `Task ${s}: ${codeText(200, 1000 + s)}` },
      ];
      for (let turn = 0, tokens = 2000; tokens < TARGET_TOKENS; turn++, tokens += turnTokens) {
        const t0 = performance.now();
        const res = await fetch(target.url(s + offset), {
          method: "POST",
          headers: { "content-type": "application/json", ...target.headers(s + offset) },
          body: JSON.stringify({ model: "bench", messages, tools: TOOLS, max_tokens: 256 }),
        });
        const body = (await res.json()) as { choices?: Array<{ message: Record<string, unknown> }> };
        latencies.push(performance.now() - t0);
        const msg = body.choices?.[0]?.message;
        if (!res.ok || !msg) throw new Error(`${target.name}: HTTP ${res.status} ${JSON.stringify(body).slice(0, 300)}`);
        const calls = (msg["tool_calls"] ?? []) as Array<{ id: string }>;
        messages.push({ role: "assistant", content: msg["content"] ?? "", tool_calls: calls });
        for (const c of calls) messages.push({ role: "tool", tool_call_id: c.id, content: codeText(turnTokens, s * 1000 + turn) });
      }
    }),
  );
  return latencies;
}

// ------------------------------------------------------------------ engine role
async function engineRole(): Promise<void> {
  const model = loadProxyModel(QWEN3_DIR);
  const ids = [...model.tokenizer.encode(REPLY_TEXT), model.codec.endOfTurnId];
  let n = 0;
  const readBody = (req: IncomingMessage) =>
    new Promise<string>((resolve) => {
      const parts: Buffer[] = [];
      req.on("data", (d: Buffer) => parts.push(d)).on("end", () => resolve(Buffer.concat(parts).toString()));
    });
  const server = createServer(async (req, res) => {
    if (req.method !== "POST") return void res.writeHead(200, { "content-length": 0 }).end();
    await readBody(req);
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
/**
 * The proxy with the scripted engine in its own process (`--engine inproc`,
 * the default: nothing but the proxy's own work is measured) or with the
 * engine process behind HTTP in vLLM's format (`--engine vllm`). Records, per
 * request, the wall time inside the proxy minus the engine's share, and writes
 * them to --stats-out when terminated.
 */
async function proxyRole(enginePort: number, engineKind: string, statsOut: string): Promise<void> {
  const model = loadProxyModel(QWEN3_DIR);
  const engine =
    engineKind === "vllm"
      ? new VllmEngine({ baseUrl: `http://127.0.0.1:${enginePort}`, model: "bench" })
      : new ScriptedEngine({ script: () => ({ text: REPLY_TEXT }), encode: (t) => model.tokenizer.encode(t), endOfTurnId: model.codec.endOfTurnId, chunkSize: 4 });
  const engineMs = new Map<string, number>();
  const added: number[] = [];
  const proxy = await ProxyServer.start({
    model,
    engine,
    servedModels: ["bench"],
    onTurn: (e) => engineMs.set(e.session_id, engineKind === "vllm" ? e.turn.timings.duration_ms : 0),
    onRequestEnd: (e) => added.push(e.duration_ms - (engineMs.get(e.session_id ?? "") ?? 0)),
  });
  // Twice the sessions: a warm-up run and the measured run (a session's history only grows).
  const sessions = Array.from({ length: 2 * SESSIONS }, (_, i) => proxy.createSession(`b${i}`));
  process.once("SIGTERM", () => {
    writeFileSync(statsOut, JSON.stringify(added));
    process.exit(0);
  });
  console.log(JSON.stringify({ sessions: sessions.map((s) => ({ url: `${s.baseUrl}/v1/chat/completions`, secret: s.secret })) }));
}

// ------------------------------------------------------------------ driver
function child(cmd: string, args: string[], env: Record<string, string> = {}): { proc: ChildProcess; firstLine: Promise<string> } {
  const proc = spawn(cmd, args, { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, ...env } });
  const lines = createInterface({ input: proc.stdout! });
  const firstLine = new Promise<string>((resolve, reject) => {
    lines.once("line", resolve);
    proc.once("exit", (code) => reject(new Error(`${cmd} exited with ${code} before reporting`)));
  });
  return { proc, firstLine };
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

async function driver(): Promise<void> {
  const tsx = ["--import", "tsx", SELF];
  const engineKind = strArg("engine", "inproc");
  const only = process.argv.includes("--only") ? strArg("only", "").split(",") : null;
  const engine = child(process.execPath, [...tsx, "--role", "engine", "--sessions", String(SESSIONS)]);
  const enginePort = (JSON.parse(await engine.firstLine) as { port: number }).port;
  const procs: ChildProcess[] = [engine.proc];
  const e2e: Record<string, number[]> = {};
  const hop: Record<string, number[]> = {};
  const run = async (name: string, t: Pick<Target, "url" | "headers">) => {
    await drive({ name, ...t }, SESSIONS);
    const lat = await drive({ name, ...t });
    e2e[name] = lat;
    console.log(`${name.padEnd(12)} end-to-end n=${lat.length} p50=${pct(lat, 50).toFixed(2)}ms p99=${pct(lat, 99).toFixed(2)}ms`);
  };
  const want = (name: string) => !only || only.includes(name);
  const fixed = (url: string, headers: Record<string, string> = {}) => ({ url: () => url, headers: () => headers });
  try {
    if (want("direct")) await run("direct", fixed(`http://127.0.0.1:${enginePort}/v1/chat/completions`));
    const nginx = want("passthrough") ? await startNginx(enginePort) : null;
    if (nginx) {
      procs.push(nginx.proc);
      await run("passthrough", fixed(nginx.url));
      hop["passthrough"] = nginxAdded(nginx.log, e2e["passthrough"]!.length);
    } else if (want("passthrough")) console.log("passthrough: nginx not found (apt-get install nginx-light)");
    const litellm = want("litellm") ? await startLitellm(enginePort) : null;
    if (litellm) {
      procs.push(litellm.proc);
      await run("litellm", fixed(litellm.url, { authorization: "Bearer sk-bench" }));
    } else if (want("litellm")) console.log("litellm: not available (pip install 'litellm[proxy]' or set LITELLM_BIN)");
    if (want("proxy")) {
      const stats = join(mkdtempSync(join(tmpdir(), "bench-proxy-")), "added.json");
      const prof = process.env["BENCH_PROXY_PROFILE_DIR"] ? ["--cpu-prof", `--cpu-prof-dir=${process.env["BENCH_PROXY_PROFILE_DIR"]}`] : [];
      const p = child(process.execPath, [...prof, ...tsx, "--role", "proxy", "--engine", engineKind, "--engine-port", String(enginePort), "--sessions", String(SESSIONS), "--stats-out", stats]);
      procs.push(p.proc);
      const { sessions } = JSON.parse(await p.firstLine) as { sessions: Array<{ url: string; secret: string }> };
      await run("proxy", { url: (s) => sessions[s]!.url, headers: (s) => ({ authorization: `Bearer ${sessions[s]!.secret}` }) });
      const exited = new Promise((r) => p.proc.once("exit", r));
      p.proc.kill("SIGTERM");
      await exited;
      hop["proxy"] = (JSON.parse(readFileSync(stats, "utf8")) as number[]).slice(e2e["proxy"]!.length);
    }
  } finally {
    for (const p of procs) p.kill();
  }
  for (const [name, xs] of Object.entries(hop)) console.log(`${name.padEnd(12)} inside the hop p50=${pct(xs, 50).toFixed(2)}ms p99=${pct(xs, 99).toFixed(2)}ms`);
  const q = (xs: number[] | undefined, p: number) => (xs && xs.length ? pct(xs, p) : null);
  const e2eAdded = (name: string, p: number) => (e2e[name] && e2e["direct"] ? q(e2e[name], p)! - q(e2e["direct"], p)! : null);
  const round = (x: number | null) => (x === null ? null : Number(x.toFixed(3)));
  const ratio = (a: number | null, b: number | null) => (a === null || b === null || b <= 0 ? null : Number((a / b).toFixed(2)));
  console.log(
    JSON.stringify({
      bench: "proxy",
      sessions: SESSIONS,
      target_tokens: TARGET_TOKENS,
      engine: engineKind,
      overhead_p50_ms: round(q(hop["proxy"], 50)),
      overhead_p99_ms: round(q(hop["proxy"], 99)),
      passthrough_p50_ms: round(q(hop["passthrough"], 50)),
      e2e_added_p50_ms: { proxy: round(e2eAdded("proxy", 50)), passthrough: round(e2eAdded("passthrough", 50)), litellm: round(e2eAdded("litellm", 50)) },
      e2e_added_p99_ms: { proxy: round(e2eAdded("proxy", 99)), passthrough: round(e2eAdded("passthrough", 99)), litellm: round(e2eAdded("litellm", 99)) },
      vs_passthrough_p50: ratio(q(hop["proxy"], 50), hop["passthrough"] ? Math.max(q(hop["passthrough"], 50)!, 1) : null),
      vs_litellm: ratio(e2eAdded("proxy", 50), e2eAdded("litellm", 50)),
    }),
  );
}

const role = process.argv[process.argv.indexOf("--role") + 1];
if (process.argv.includes("--role") && role === "engine") await engineRole();
else if (process.argv.includes("--role") && role === "proxy") await proxyRole(arg("engine-port", 0), strArg("engine", "inproc"), strArg("stats-out", ""));
else await driver();
