/**
 * The proxy's process in the benchmark: the real ProxyServer calling the engine
 * process (the same engine process every other path calls) over HTTP in vLLM's
 * format, or with the Python engine's protocol (ZmqEngine) over ZeroMQ or a Unix socket. Per measured request it records its in-handler time minus the engine
 * wait (the proxy's own work), and that plus its engine-client hop (handler time
 * minus the time the engine process itself held the request, from GET /held).
 */
import { writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { PerformanceObserver } from "node:perf_hooks";
import type { EngineClient } from "../../engine/index.ts";
import { VllmEngine, ZmqEngine } from "../../engine/index.ts";
import { loadProxyModel } from "../model.ts";
import { ProxyServer } from "../server.ts";
import { QWEN3_DIR } from "../test-support.ts";
import { ROUNDS, SESSIONS } from "./args.ts";
import { wallMs, type ProxySpan } from "./stats.ts";
import { turnsPerSession } from "./workload.ts";

export interface ProxyStats {
  /** Per measured request: wall time inside the proxy minus its wait on the engine (ms): the proxy's own work. */
  added: number[];
  /** Per measured request: wall time inside the proxy minus the time the engine process held the request (ms): own work plus the engine-client hop. */
  added_with_hop: number[];
  /** Per measured request, by engine request id: its phases on the wall clock (main.ts lays them beside the driver's and the engine's). */
  spans: Record<string, ProxySpan>;
  /** Measured requests with no engine call to subtract (should be 0). */
  unmatched: number;
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

/** What timedEngine tells about a call: its wait on the engine (sum of the waits for its next chunk), when it was made and when its final chunk came (wall ms). */
type EngineCall = { requestId: string; waited: number; call: number; last: number };

/** `inner`, telling `done` about each call (EngineCall). */
function timedEngine(inner: EngineClient, done: (call: EngineCall) => void): EngineClient {
  return {
    name: inner.name,
    close: () => inner.close(),
    async *generate(req, signal) {
      const call = wallMs();
      let last = NaN;
      const it = inner.generate(req, signal)[Symbol.asyncIterator]();
      let waited = 0;
      try {
        for (;;) {
          const t0 = performance.now();
          const next = await it.next();
          const t1 = performance.now();
          waited += t1 - t0;
          if (next.done) return;
          if (next.value.finish_reason) last = performance.timeOrigin + t1;
          yield next.value;
        }
      } finally {
        done({ requestId: req.request_id, waited, call, last });
      }
    },
  };
}
/** Which engine client the proxy calls the engine process with. */
export type EngineClientKind = "http" | "zmq" | "unix";

/**
 * Runs the proxy against the engine process on `enginePort` (HTTP; also where its held
 * times are read) or, for `zmq` and `unix`, its control endpoint `controlAddress`; writes the
 * per-request figures to `statsOut` when terminated.
 */
export async function proxyRole(enginePort: number, statsOut: string, client: EngineClientKind, controlAddress: string): Promise<void> {
  const model = loadProxyModel(QWEN3_DIR);
  const engineUrl = `http://127.0.0.1:${enginePort}`;
  const engineMs = new Map<string, EngineCall>();
  if (client !== "http" && client !== "zmq" && client !== "unix") throw new Error(`bench proxy: unknown engine client ${JSON.stringify(client)} (http, zmq or unix)`);
  // The control protocol's client over the endpoint it is given: ZeroMQ (tcp://) or a Unix socket (unix://).
  const inner = client === "http" ? new VllmEngine({ baseUrl: engineUrl, model: "bench" }) : new ZmqEngine({ address: controlAddress, model: "bench" });
  // The engine's share of a request: the time its stream kept the proxy waiting (keyed by session; one call in flight per session).
  const engine = timedEngine(inner, (call) => engineMs.set(call.requestId.slice(0, call.requestId.lastIndexOf("/turn-")), call));
  const added: number[] = [];
  // For added_with_hop once the engine's held times are fetched: handler wall time and engine request id per measured request.
  let unmatched = 0;
  const handled: Array<{ requestId: string; duration: number }> = [];
  const bodyMs: number[] = [];
  const planMs: number[] = [];
  const spans: Record<string, ProxySpan> = {};
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
        const call = engineMs.get(e.session_id ?? "");
        // A request that never reached the engine (rejected before it) has no engine share to subtract; counted, not guessed.
        if (!call) unmatched++;
        else {
          added.push(e.duration_ms - call.waited);
          handled.push({ requestId: call.requestId, duration: e.duration_ms });
          spans[call.requestId] = { start: e.started_at_ms, body_ms: e.body_ms, plan_ms: e.plan_ms, call: call.call, last: call.last, end: e.started_at_ms + e.duration_ms };
        }
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
  process.once("SIGTERM", async () => {
    const measured = added.length;
    const held = (await (await fetch(`${engineUrl}/held`)).json()) as Record<string, number>;
    const addedWithHop = handled.map(({ requestId, duration }) => {
      const ms = held[requestId];
      if (ms === undefined) throw new Error(`bench proxy: the engine has no held time for ${requestId}`);
      return duration - ms;
    });
    const stats: ProxyStats = {
      added,
      added_with_hop: addedWithHop,
      spans,
      unmatched,
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
  console.log(JSON.stringify({ sessions: sessions.map((s) => ({ url: s.baseUrl, secret: s.secret })) }));
}

