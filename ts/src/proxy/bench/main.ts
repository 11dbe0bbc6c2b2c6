/**
 * Benchmark (not a test): added latency of the proxy on agent-sized traffic.
 *
 * 64 concurrent sessions each run a multi-turn tool-calling conversation whose
 * history grows from ~2k to ~30k tokens. The same workload is sent
 *   direct      client -> engine                      (the reference)
 *   direct_again client -> engine, again                (the instrument's noise floor: the reference paired with itself)
 *   passthrough client -> nginx -> engine             (floor: no templating or tokenization)
 *   node_tcp_relay  client -> Node.js byte pipe -> engine (the host's price for a process in the path; relay-role.ts)
 *   node_http_relay client -> Node.js node:http relay -> engine (the same, plus Node's HTTP server and client)
 *   litellm     client -> LiteLLM proxy -> engine     (when a `litellm` binary is found; one worker per core)
 *   proxy       client -> lego proxy -> engine        (template + tokenize + capture; vLLM client over HTTP)
 *   proxy_zmq   client -> lego proxy -> engine        (the same, with the ZeroMQ engine client)
 *   proxy_unix  client -> lego proxy -> engine        (the same client over a Unix socket: an engine on the proxy's host)
 * Every path calls the same engine process (engine-role.ts): OpenAI chat JSON
 * over HTTP for the token-free paths, vLLM /v1/completions SSE with ids for
 * `proxy`, and the Python engine's msgpack protocol (prompt ids as one binary
 * int32 array) over ZeroMQ for `proxy_zmq` and over a Unix socket for
 * `proxy_unix`, so every path pays one engine hop.
 *
 * Two API shapes (--apis openai,anthropic; workload.ts): Chat Completions, and
 * Claude-Code-shaped Messages (system blocks, tool_result blocks, re-serialized
 * tool inputs, a moving cache breakpoint: no re-sent body repeats the last).
 * LiteLLM runs the OpenAI shape only (for Messages it would add a translation
 * to Chat Completions that the other paths do not pay).
 *
 * Two workloads, each run for every path and API:
 *   paced         the engine takes a stated time per sampled token
 *                 (--decode-ms-per-token, default 20 ms: a batched decode step
 *                 of a served MoE model): a JSON reply leaves once the last
 *                 token is sampled, a streamed one (the proxy's paths) sends
 *                 each chunk as its tokens are (--stream-pacing decode, as vLLM
 *                 and the Python engine do; "end" holds them all to the last),
 *                 so the last token reaches every path at the same time; and
 *                 the harness a seeded 0-200 ms between calls (--tool-ms 100:
 *                 running the tool); sessions start spread out, so they wait on
 *                 the engine as in a real rollout instead of firing in waves;
 *   back_to_back  the engine answers at once, so 64 sessions fire requests back
 *                 to back and every path runs at CPU saturation (a throughput
 *                 test: added latency there is mostly queueing for the CPU).
 *
 * Figures per path and workload:
 *   paired added  per request: the path's client-observed latency minus the
 *               direct call's for the same request (same session, turn and
 *               bytes, same engine decode time; see stats.ts), pooled over
 *               --rounds measured runs in which the paths take turns; p50/p99
 *               are of those differences, negatives kept;
 *   in the hop  for the proxy, its handler wall time minus its wait on the
 *               engine (own work), and minus the time the engine process held
 *               the request (own work plus its engine-client hop); for nginx,
 *               $request_time - $upstream_response_time (1 ms resolution);
 *   cpu         proxy process CPU (user + system) and GC pause time per request;
 *   phases      of the proxy's hop: reading the body, and parsing and planning it;
 *   engine late per path, direct included: how long after its due time (request read +
 *               decode time) the engine's timer let each reply's last token leave; the paired
 *               figures hold only while this is the same on every path;
 *   critical path per path, the p50 of each segment of a request's time outside the engine's
 *               decode, from the driver's, the proxy's and the engine's marks on the shared
 *               wall clock: to the handler, body, (proxy: plan, to the engine, engine to proxy,)
 *               reply to the client (stats.ts).
 * noise_floor_p50_ms / noise_floor_p99_ms are direct_again's paired figures: what the
 * instrument reads for a path that adds nothing (engine timers, the driver's event loop
 * and the two cores' scheduling differ between any two runs of the same request).
 * The last line's overhead_p50_ms / overhead_p99_ms are the PAIRED added latency
 * of the PACED workload (`"measure"` says so) for `proxy`, zmq_overhead_* for `proxy_zmq`, unix_overhead_* for
 * `proxy_unix`; vs_passthrough_p50 is that p50
 * over nginx's paired added p50 (unclamped; null when nginx's is not positive,
 * and nginx's own figure is beside it); vs_litellm likewise over LiteLLM's.
 * Every other figure is kept under "paced" and "back_to_back".
 *
 * Run: pnpm exec tsx src/proxy/bench/main.ts [--sessions 64] [--target-tokens 30000] [--rounds 3]
 *        [--decode-ms-per-token 20] [--tool-ms 100] [--stream-pacing decode|end] [--workloads paced,back_to_back] [--apis openai,anthropic]
 *        [--only direct,direct_again,passthrough,node_tcp_relay,node_http_relay,litellm,proxy,proxy_zmq,proxy_unix]
 * The proxy process runs with the V8 flags `lego` uses (node-flags.ts); so do the driver and the engine, so the instrument's own collections stay rare.
 * Profiling the proxy process: --cpu-prof-dir DIR (node's --cpu-prof), --proxy-node-flags "--trace-gc".
 * Last stdout line: {"bench":"proxy","measure":...,"overhead_p50_ms",...,"anthropic_overhead_p50_ms",...}.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { PROXY_NODE_FLAGS } from "../node-flags.ts";
import { arg, DECODE_MS_PER_TOKEN, ROUNDS, SESSIONS, STREAM_PACING, strArg, TARGET_TOKENS, TOOL_MS } from "./args.ts";
import { engineRole } from "./engine-role.ts";
import { child, nginxAdded, startLitellm, startNginx, type Child } from "./peers.ts";
import { proxyRole, type EngineClientKind, type ProxyStats } from "./proxy-role.ts";
import { RELAY_PATHS, relayRole, type RelayKind } from "./relay-role.ts";
import { directSegments, pairedAdded, pct, proxySegments, segmentMedians, type DriverSpan, type EngineSpan, type PathSegments } from "./stats.ts";
import { APIS, drive, turnsPerSession, type Api, type Target } from "./workload.ts";

const SELF = fileURLToPath(import.meta.url);
/** The proxy's paths: the same proxy with each engine client (proxy-role.ts), against the one engine process. */
const PROXY_PATHS: Record<string, EngineClientKind> = { proxy: "http", proxy_zmq: "zmq", proxy_unix: "unix" };
interface WorkloadResult {
  decode_ms_per_token: number;
  tool_ms: number;
  /** Client-observed added latency per request (path minus direct, same request; stats.ts), then its percentile. */
  paired_added_p50_ms: Record<string, number | null>;
  paired_added_p99_ms: Record<string, number | null>;
  /** Share of requests whose paired difference is negative (the direct call was slower). */
  paired_negative_share: Record<string, number | null>;
  /** Per proxy path: its latency minus node_tcp_relay's for the same request (the proxy's work beyond a bare process hop), then the percentile. */
  paired_over_tcp_relay_p50_ms: Record<string, number | null>;
  paired_over_tcp_relay_p99_ms: Record<string, number | null>;
  /** Inside the hop (proxy: handler wall time minus engine waits; proxy_with_engine_hop: minus the engine's own time; nginx: from its log). */
  in_hop_p50_ms: Record<string, number | null>;
  in_hop_p99_ms: Record<string, number | null>;
  direct_p50_ms: number | null;
  /**
   * Per path including direct: how late the engine's timer let each reply's last token leave (from the
   * moment the request was read, beyond decodeMs per token). Equal across paths when every path gets the same engine
   * reply time, as the paired figures assume.
   */
  engine_late_p50_ms: Record<string, number | null>;
  engine_late_p99_ms: Record<string, number | null>;
  /** Per proxy path (PROXY_PATHS). */
  proxy_cpu_ms_per_request: Record<string, number | null>;
  proxy_cpu_system_ms_per_request: Record<string, number | null>;
  proxy_gc_ms_per_request: Record<string, number | null>;
  proxy_gc_max_ms: Record<string, number | null>;
  /** Per proxy path: p50 and p99 of two phases inside the hop, reading the body, and parsing and planning it. */
  proxy_phases_ms: Record<string, { body_read: [number, number]; plan: [number, number] }>;
  /**
   * Per path, where a request's time outside the engine's decode goes, segment by segment along
   * the path (p50 of each over the measured requests; stats.ts directSegments / proxySegments),
   * from the driver's, the proxy's and the engine's marks on the shared wall clock. Medians of
   * segments do not add up to the median of their sum; this says where to look, the paired
   * figures say how much a path adds.
   */
  critical_path_p50_ms: Record<string, Record<string, number>>;
}

const round = (x: number | null) => (x === null ? null : Number(x.toFixed(3)));

/** Runs every wanted path against an engine that waits `decodeMs` per sampled token. */
async function workload(label: string, decodeMs: number, toolMs: number, api: Api, want: (name: string) => boolean): Promise<WorkloadResult> {
  const tsx = ["--import", "tsx", SELF];
  console.log(`--- ${label}: ${api} API, engine ${decodeMs} ms per sampled token, tool time ${toolMs} ms on average`);
  // The engine is part of the instrument: with Node's default heap it ran a full collection every
  // couple of seconds (the external memory of the bodies it reads), pauses every path's requests
  // alike. With the flags the proxy and the driver run with, 38 -> 6 per run (--trace-gc, 2026-12-07).
  // Every file of this workload (the engine's socket, nginx's and LiteLLM's configs and logs, the proxies'
  // stats) goes in one directory, removed when the workload is done.
  const scratch = mkdtempSync(join(tmpdir(), "bench-proxy-"));
  const engine = child(process.execPath, [...PROXY_NODE_FLAGS, ...tsx, "--role", "engine", "--socket-path", join(scratch, "engine.sock"), "--sessions", String(SESSIONS), "--decode-ms-per-token", String(decodeMs), "--stream-pacing", STREAM_PACING]);
  const { port: enginePort, zmq: engineZmq, unix: engineUnix } = JSON.parse(await engine.firstLine) as { port: number; zmq: string; unix: string };
  // Every path fails once the engine is gone: say so, with how it went, instead of leaving only the paths' errors.
  let finished = false;
  engine.proc.once("exit", (code, signal) => {
    if (!finished) console.error(`bench proxy: the engine process exited mid-workload (code ${code}, signal ${signal})`);
  });
  const procs: ChildProcess[] = [engine.proc];
  const e2e: Record<string, Map<string, number>> = {};
  const hop: Record<string, number[]> = {};
  const proxyStats: Record<string, ProxyStats> = {};
  // Per path, how late the engine let each measured reply's last token leave (its GET /lateness).
  const late: Record<string, number[]> = {};
  // Per path, each measured request's marks: the driver's (by session/turn) and the engine's (its GET /spans; by
  // session/turn on the chat paths, by engine request id on the proxy's).
  const driverSpans: Record<string, Map<string, DriverSpan>> = {};
  const engineSpans: Record<string, Record<string, EngineSpan>> = {};
  const fixed = (url: string, headers: Record<string, string> = {}) => ({ url: () => url, headers: () => headers });
  const targets: Target[] = [];
  let nginx: Awaited<ReturnType<typeof startNginx>> = null;
  const proxies: Record<string, { proc: Child; stats: string }> = {};
  try {
    if (want("direct")) targets.push({ name: "direct", ...fixed(`http://127.0.0.1:${enginePort}`) });
    // Runs right after direct in every round: a path that adds nothing, paired with the reference.
    if (want("direct_again")) targets.push({ name: "direct_again", ...fixed(`http://127.0.0.1:${enginePort}`) });
    nginx = want("passthrough") ? await startNginx(enginePort, mkdtempSync(join(scratch, "nginx-"))) : null;
    if (nginx) {
      procs.push(nginx.proc);
      targets.push({ name: "passthrough", ...fixed(nginx.url) });
    } else if (want("passthrough")) console.log("passthrough: nginx not found (apt-get install nginx-light)");
    // Node.js processes that only forward (relay-role.ts), with the proxy's V8 flags: what the host and Node's HTTP layer charge for a hop.
    for (const [name, kind] of Object.entries(RELAY_PATHS)) {
      if (!want(name)) continue;
      const relay = child(process.execPath, [...PROXY_NODE_FLAGS, ...tsx, "--role", "relay", "--relay", kind, "--engine-port", String(enginePort)]);
      procs.push(relay.proc);
      targets.push({ name, ...fixed((JSON.parse(await relay.firstLine) as { url: string }).url) });
    }
    // LiteLLM would turn Messages into a Chat Completions call to the engine: not the same hop, so it runs the OpenAI workload only.
    const litellm = want("litellm") && api === "openai" ? await startLitellm(enginePort, mkdtempSync(join(scratch, "litellm-")), strArg("litellm-bin", "")) : null;
    if (litellm) {
      procs.push(litellm.proc);
      targets.push({ name: "litellm", ...fixed(litellm.url, { authorization: "Bearer sk-bench" }) });
    } else if (want("litellm") && api === "openai") console.log("litellm: not available (pip install 'litellm[proxy]' or pass --litellm-bin)");
    // One proxy process per engine client (PROXY_PATHS), each against the same engine process.
    for (const [name, client] of Object.entries(PROXY_PATHS)) {
      if (!want(name)) continue;
      const statsOut = join(scratch, `${name}-stats.json`);
      const profDir = strArg("cpu-prof-dir", "");
      const prof = profDir ? ["--cpu-prof", `--cpu-prof-dir=${profDir}`] : [];
      // The flags `lego` runs the proxy with, then extra ones for this process only, e.g. --proxy-node-flags "--trace-gc".
      prof.push(...PROXY_NODE_FLAGS, ...strArg("proxy-node-flags", "").split(" ").filter(Boolean));
      const p = child(process.execPath, [...prof, ...tsx, "--role", "proxy", "--engine-port", String(enginePort), "--engine-client", client, "--engine-control", client === "unix" ? engineUnix : engineZmq, "--sessions", String(SESSIONS), "--rounds", String(ROUNDS), "--stats-out", statsOut]);
      procs.push(p.proc);
      proxies[name] = { proc: p, stats: statsOut };
      const { sessions } = JSON.parse(await p.firstLine) as { sessions: Array<{ url: string; secret: string }> };
      targets.push({ name, url: (s) => sessions[s]!.url, headers: (s): Record<string, string> => (api === "openai" ? { authorization: `Bearer ${sessions[s]!.secret}` } : { "x-api-key": sessions[s]!.secret }) });
    }
    const lateness = async () => (await (await fetch(`http://127.0.0.1:${enginePort}/lateness`)).json()) as number[];
    const spans = async () => (await (await fetch(`http://127.0.0.1:${enginePort}/spans`)).json()) as Record<string, EngineSpan>;
    // Sessions 0..SESSIONS-1 warm every path up; round r uses sessions r*SESSIONS.. (new texts, and new proxy sessions).
    for (const t of targets) await drive(t, 0, toolMs, api);
    await lateness();
    await spans();
    for (let round = 1; round <= ROUNDS; round++)
      for (const t of targets) {
        await proxies[t.name]?.proc.ask("measure");
        const lat = await drive(t, round * SESSIONS, toolMs, api, (driverSpans[t.name] ??= new Map()));
        await proxies[t.name]?.proc.ask("pause");
        (late[t.name] ??= []).push(...(await lateness()));
        Object.assign((engineSpans[t.name] ??= {}), await spans());
        const all = (e2e[t.name] ??= new Map());
        for (const [k, v] of lat) all.set(k, v);
        const xs = [...lat.values()];
        console.log(`${t.name.padEnd(12)} round ${round} end-to-end n=${xs.length} p50=${pct(xs, 50).toFixed(2)}ms p99=${pct(xs, 99).toFixed(2)}ms`);
      }
    for (const t of targets) {
      const xs = [...e2e[t.name]!.values()];
      console.log(`${t.name.padEnd(12)} all rounds end-to-end n=${xs.length} p50=${pct(xs, 50).toFixed(2)}ms p99=${pct(xs, 99).toFixed(2)}ms`);
    }
    for (const [name, xs] of Object.entries(late)) console.log(`${name.padEnd(12)} engine's last token late by p50=${pct(xs, 50).toFixed(3)}ms p99=${pct(xs, 99).toFixed(3)}ms`);
    if (nginx) hop["passthrough"] = nginxAdded(nginx.log, SESSIONS * turnsPerSession());
    for (const [name, { proc, stats: statsOut }] of Object.entries(proxies)) {
      const exited = new Promise((r) => proc.proc.once("exit", r));
      proc.proc.kill("SIGTERM");
      await exited;
      const st = (proxyStats[name] = JSON.parse(readFileSync(statsOut, "utf8")) as ProxyStats);
      hop[name] = st.added;
      hop[`${name}_with_engine_hop`] = st.added_with_hop;
      if (st.unmatched > 0) console.log(`${name.padEnd(12)} ${st.unmatched} measured requests had no engine call to subtract`);
      console.log(`${name.padEnd(12)} cpu ${st.cpu_ms_per_request} ms/request (system ${st.cpu_system_ms_per_request}), gc ${st.gc_ms_per_request} ms/request (${st.gc_count} pauses, longest ${st.gc_max_ms} ms)`);
    }
  } finally {
    finished = true;
    for (const p of procs) p.kill();
    rmSync(scratch, { recursive: true, force: true });
  }
  for (const [name, xs] of Object.entries(hop)) console.log(`${name.padEnd(12)} inside the hop p50=${pct(xs, 50).toFixed(2)}ms p99=${pct(xs, 99).toFixed(2)}ms`);
  for (const [name, st] of Object.entries(proxyStats))
    console.log(`${name.padEnd(12)} of which reading the body p50=${pct(st.body_ms, 50).toFixed(2)}ms p99=${pct(st.body_ms, 99).toFixed(2)}ms, parsing and planning p50=${pct(st.plan_ms, 50).toFixed(2)}ms p99=${pct(st.plan_ms, 99).toFixed(2)}ms`);
  const q = (xs: number[] | undefined, p: number) => (xs && xs.length ? pct(xs, p) : null);
  const paths = [...Object.keys(PROXY_PATHS), "passthrough", ...Object.keys(RELAY_PATHS), "litellm", "direct_again"];
  const hops = [...Object.keys(PROXY_PATHS).flatMap((n) => [n, `${n}_with_engine_hop`]), "passthrough"];
  const ps = (f: (st: ProxyStats) => number) => Object.fromEntries(Object.keys(PROXY_PATHS).map((n) => [n, proxyStats[n] ? f(proxyStats[n]) : null]));
  const paired = Object.fromEntries(paths.map((n) => [n, e2e[n] && e2e["direct"] ? pairedAdded(e2e[n], e2e["direct"]) : undefined]));
  // Each proxy path against the bare hop, request by request: the proxy's work beyond what any process in the path costs.
  const overRelay = Object.fromEntries(Object.keys(PROXY_PATHS).map((n) => [n, e2e[n] && e2e["node_tcp_relay"] ? pairedAdded(e2e[n], e2e["node_tcp_relay"]) : undefined]));
  const segments: Record<string, PathSegments[]> = {};
  for (const [name, byKey] of Object.entries(driverSpans)) {
    const rows: PathSegments[] = (segments[name] = []);
    const engineBy = engineSpans[name] ?? {};
    const proxyBy = proxyStats[name]?.spans;
    if (proxyBy) {
      // The proxy's request ids are its session's (b<session>, proxy-role.ts) and turn's: the driver's key is "session/turn".
      for (const [requestId, p] of Object.entries(proxyBy)) {
        const m = /^b(\d+)\/turn-(\d+)$/.exec(requestId);
        const d = m ? byKey.get(`${m[1]}/${m[2]}`) : undefined;
        const e = engineBy[requestId];
        if (d && e) rows.push(proxySegments(d, p, e));
      }
    } else
      for (const [key, d] of byKey) {
        const e = engineBy[key];
        if (e) rows.push(directSegments(d, e));
      }
  }
  const per = (f: (name: string) => number | null) => Object.fromEntries(paths.map((n) => [n, round(f(n))]));
  const result: WorkloadResult = {
    decode_ms_per_token: decodeMs,
    tool_ms: toolMs,
    paired_added_p50_ms: per((n) => q(paired[n], 50)),
    paired_added_p99_ms: per((n) => q(paired[n], 99)),
    paired_negative_share: per((n) => (paired[n]?.length ? paired[n]!.filter((x) => x < 0).length / paired[n]!.length : null)),
    paired_over_tcp_relay_p50_ms: Object.fromEntries(Object.keys(PROXY_PATHS).map((n) => [n, round(q(overRelay[n], 50))])),
    paired_over_tcp_relay_p99_ms: Object.fromEntries(Object.keys(PROXY_PATHS).map((n) => [n, round(q(overRelay[n], 99))])),
    in_hop_p50_ms: Object.fromEntries(hops.map((n) => [n, round(q(hop[n], 50))])),
    in_hop_p99_ms: Object.fromEntries(hops.map((n) => [n, round(q(hop[n], 99))])),
    direct_p50_ms: round(q(e2e["direct"] && [...e2e["direct"].values()], 50)),
    engine_late_p50_ms: Object.fromEntries(["direct", ...paths].map((n) => [n, round(q(late[n], 50))])),
    engine_late_p99_ms: Object.fromEntries(["direct", ...paths].map((n) => [n, round(q(late[n], 99))])),
    proxy_cpu_ms_per_request: ps((st) => st.cpu_ms_per_request),
    proxy_cpu_system_ms_per_request: ps((st) => st.cpu_system_ms_per_request),
    proxy_gc_ms_per_request: ps((st) => st.gc_ms_per_request),
    proxy_gc_max_ms: ps((st) => st.gc_max_ms),
    proxy_phases_ms: Object.fromEntries(Object.entries(proxyStats).map(([n, st]) => [n, { body_read: [round(pct(st.body_ms, 50))!, round(pct(st.body_ms, 99))!], plan: [round(pct(st.plan_ms, 50))!, round(pct(st.plan_ms, 99))!] }])),
    critical_path_p50_ms: Object.fromEntries(Object.entries(segments).filter(([, rows]) => rows.length > 0).map(([n, rows]) => [n, segmentMedians(rows)])),
  };
  for (const [name, segs] of Object.entries(result.critical_path_p50_ms))
    console.log(`${name.padEnd(12)} outside the engine's decode, p50 per segment: ${Object.entries(segs).map(([k, v]) => `${k} ${v}`).join(", ")} ms (n=${segments[name]!.length})`);
  if (e2e["node_tcp_relay"])
    console.log(`${label.padEnd(12)} over node_tcp_relay, paired p50/p99: ${Object.keys(PROXY_PATHS).map((n) => `${n} ${result.paired_over_tcp_relay_p50_ms[n]}/${result.paired_over_tcp_relay_p99_ms[n]} ms`).join(", ")}`);
  console.log(`${label.padEnd(12)} paired added p50/p99: ${paths.map((n) => `${n} ${result.paired_added_p50_ms[n]}/${result.paired_added_p99_ms[n]} ms`).join(", ")}`);
  return result;
}

async function driver(): Promise<void> {
  const only = process.argv.includes("--only") ? strArg("only", "").split(",") : null;
  const want = (name: string) => !only || only.includes(name);
  const workloads = strArg("workloads", "paced,back_to_back").split(",");
  const apis = strArg("apis", APIS.join(",")).split(",") as Api[];
  const results: Record<string, WorkloadResult> = {};
  for (const api of apis) if (!APIS.includes(api)) throw new Error(`unknown --apis entry ${api} (known: ${APIS.join(", ")})`);
  for (const w of workloads) {
    if (w !== "paced" && w !== "back_to_back") throw new Error(`unknown workload ${w}`);
    for (const api of apis) {
      const key = api === "openai" ? w : `${w}_${api}`;
      results[key] = await workload(key, w === "paced" ? DECODE_MS_PER_TOKEN : 0, w === "paced" ? TOOL_MS : 0, api, want);
    }
  }
  const head = results["paced"] ?? results["back_to_back"] ?? results["paced_anthropic"] ?? results["back_to_back_anthropic"]!;
  const measure = results["paced"] ? "paired_added_paced" : results["back_to_back"] ? "paired_added_back_to_back" : results["paced_anthropic"] ? "paired_added_paced_anthropic" : "paired_added_back_to_back_anthropic";
  const anthropic = results["paced_anthropic"] ?? results["back_to_back_anthropic"];
  const ratio = (a: number | null | undefined, b: number | null | undefined) => (a == null || b == null || b <= 0 ? null : Number((a / b).toPrecision(3)));
  // Unclamped: a floor at or below 0 makes the ratio meaningless, so it is null and the floor itself is reported.
  const floor = head.paired_added_p50_ms["passthrough"];
  console.log(
    JSON.stringify({
      bench: "proxy",
      measure,
      sessions: SESSIONS,
      target_tokens: TARGET_TOKENS,
      engine: "one separate process for every path: HTTP (vLLM completions format for the proxy), ZeroMQ for proxy_zmq, a Unix socket for proxy_unix",
      stream_pacing: STREAM_PACING,
      overhead_p50_ms: head.paired_added_p50_ms["proxy"],
      overhead_p99_ms: head.paired_added_p99_ms["proxy"],
      proxy_in_handler_with_engine_hop_p50_ms: head.in_hop_p50_ms["proxy_with_engine_hop"],
      proxy_in_handler_with_engine_hop_p99_ms: head.in_hop_p99_ms["proxy_with_engine_hop"],
      passthrough_p50_ms: floor,
      // A Node.js process that only pipes bytes (relay-role.ts): the host's price for any process in the path.
      node_tcp_relay_p50_ms: head.paired_added_p50_ms["node_tcp_relay"] ?? null,
      node_http_relay_p50_ms: head.paired_added_p50_ms["node_http_relay"] ?? null,
      unix_over_tcp_relay_p50_ms: head.paired_over_tcp_relay_p50_ms["proxy_unix"] ?? null,
      vs_passthrough_p50: ratio(head.paired_added_p50_ms["proxy"], floor),
      vs_litellm: ratio(head.paired_added_p50_ms["proxy"], head.paired_added_p50_ms["litellm"]),
      litellm_workers: want("litellm") ? availableParallelism() : null,
      noise_floor_p50_ms: head.paired_added_p50_ms["direct_again"] ?? null,
      noise_floor_p99_ms: head.paired_added_p99_ms["direct_again"] ?? null,
      anthropic_overhead_p50_ms: anthropic?.paired_added_p50_ms["proxy"] ?? null,
      anthropic_overhead_p99_ms: anthropic?.paired_added_p99_ms["proxy"] ?? null,
      // The second run: the same proxy over the ZeroMQ engine client, against the same engine process, in the same rounds.
      zmq_overhead_p50_ms: head.paired_added_p50_ms["proxy_zmq"] ?? null,
      zmq_overhead_p99_ms: head.paired_added_p99_ms["proxy_zmq"] ?? null,
      anthropic_zmq_overhead_p50_ms: anthropic?.paired_added_p50_ms["proxy_zmq"] ?? null,
      anthropic_zmq_overhead_p99_ms: anthropic?.paired_added_p99_ms["proxy_zmq"] ?? null,
      // The third: the same client over a Unix socket (an engine on the proxy's host), same engine process and rounds.
      unix_overhead_p50_ms: head.paired_added_p50_ms["proxy_unix"] ?? null,
      unix_overhead_p99_ms: head.paired_added_p99_ms["proxy_unix"] ?? null,
      anthropic_unix_overhead_p50_ms: anthropic?.paired_added_p50_ms["proxy_unix"] ?? null,
      anthropic_unix_overhead_p99_ms: anthropic?.paired_added_p99_ms["proxy_unix"] ?? null,
      anthropic_noise_floor_p50_ms: anthropic?.paired_added_p50_ms["direct_again"] ?? null,
      anthropic_noise_floor_p99_ms: anthropic?.paired_added_p99_ms["direct_again"] ?? null,
      anthropic_vs_passthrough_p50: anthropic ? ratio(anthropic.paired_added_p50_ms["proxy"], anthropic.paired_added_p50_ms["passthrough"]) : null,
      ...results,
    }),
  );
}

const role = process.argv[process.argv.indexOf("--role") + 1];
if (process.argv.includes("--role") && role === "engine") await engineRole(arg("decode-ms-per-token", 0), STREAM_PACING, strArg("socket-path", ""));
else if (process.argv.includes("--role") && role === "proxy") await proxyRole(arg("engine-port", 0), strArg("stats-out", ""), strArg("engine-client", "http") as EngineClientKind, strArg("engine-control", ""));
else if (process.argv.includes("--role") && role === "relay") await relayRole(strArg("relay", "") as RelayKind, arg("engine-port", 0));
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

