/**
 * Data-plane benchmark (not a test): TS Sender -> Python Receiver over loopback TCP,
 * compared with the same trajectories as JSON over HTTP and with raw TCP bytes.
 *
 *   cd ts && pnpm exec tsx src/transport/bench.ts [--quick] [--spool-root DIR] [--shm-root DIR|""]
 *
 * The headline spools (sender and receiver) live under --spool-root, by default
 * the OS temporary folder (a real disk here: ext4), so its fsyncs are paid as a
 * deployment pays them. The consumer hand-over's big run is repeated with the
 * spools under --shm-root (default /dev/shm, where fsync is free; "" skips it) and
 * reported as the labelled second line `shm_*`. Every row has its own source
 * arrays (its own seed), so no row reads another's cache-hot memory. The last line is JSON:
 * {"bench":"transport","handover":"consumer","gbps":…,"tokens_per_s":…,"p99_ms":…,"vs_json":…,"vs_raw_tcp":…,"zero_copy":…}
 *
 * Both hand-over modes of the receiver are measured (docs/transport.md). The
 * headline figures (`gbps`, `vs_raw_tcp`, …) are the consumer hand-over's: it is
 * how a trainer hosts the receiver (the batch goes straight into its queue, and
 * the sender's spool is the durable copy until the trainer commits), so it is
 * the data plane's throughput. The spool hand-over (a second durable copy on
 * the receiver) is reported beside it as `spool_handover_*`.
 */
import { request, Agent } from "node:http";
import { connect } from "node:net";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import type { RoutingShape, Trajectory } from "../schema/index.ts";
import { JsonLineProcess, PYTHON, readPort, type JsonEvent } from "./bench-peers.ts";
import { trajectoryTokens } from "./batcher.ts";
import { Sender } from "./sender.ts";
import { syntheticTrajectory } from "./workload.ts";

const { values: args } = parseArgs({ options: { quick: { type: "boolean", default: false }, "spool-root": { type: "string", default: tmpdir() }, "shm-root": { type: "string", default: "/dev/shm" }, "plain-malloc": { type: "boolean", default: false } } });
const ROUTING: RoutingShape = { layers: 48, top_k: 8, num_experts: 128 }; // Qwen3-30B-A3B-like: 48 layers, top-8 of 128
const root = mkdtempSync(join(args["spool-root"]!, "lego-bench-"));
const shmRoot = args["shm-root"] ? mkdtempSync(join(args["shm-root"], "lego-bench-")) : null;
const log = (line: string) => process.stderr.write(`${line}\n`);

let senderPeakRss = process.memoryUsage().rss;
const rssTimer = setInterval(() => {
  senderPeakRss = Math.max(senderPeakRss, process.memoryUsage().rss);
}, 10);

function quantile(sorted: number[], q: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! : NaN;
}

interface TransportResult {
  name: string;
  trajectories: number;
  tokens: number;
  bytes: number;
  seconds: number;
  gbps: number;
  tokens_per_s: number;
  p50_ms: number;
  p99_ms: number;
  zero_copy: boolean;
  sender_peak_rss_mb: number;
  receiver_peak_rss_mb: number;
  /** CPU seconds spent while sending: comparable across runs even when the machine is busy. */
  sender_cpu_s: number;
  /** The receiver process's whole CPU time, start-up (imports, warm-up) included. */
  receiver_cpu_s: number;
}

type Handover = "consumer" | "spool";

/**
 * One receiver process and one sender, kept for every run of a hand-over mode:
 * a trainer hosts its receiver for hours and a rollout worker keeps its
 * sender, so runs measure both in their steady state (warm heap pages, JIT,
 * mapped spool slots). A fresh pair per run measured 15-20 % lower on this
 * VM, all of it start-up (first-touch page faults of the receiver's first
 * batches, cold code paths). The receiver's CPU per run is read from
 * /proc/<pid>/stat around the run, so measuring costs the receiver nothing.
 *
 * `handover`: "consumer" acks once the receiver's consumer asks for the next
 * batch; "spool" acks once the batch is in the receiver's spool (recycled
 * after consumption).
 */
class TransportSession {
  private batches = 0;

  private constructor(
    private readonly receiver: JsonLineProcess,
    private readonly sender: Sender,
  ) {}

  /** `dir`: where both spools live (the headline's real disk, or /dev/shm for the second line). */
  static async start(handover: Handover, dir = root): Promise<TransportSession> {
    const receiver = new JsonLineProcess(`receiver-${handover}`, PYTHON, [
      "-m", "lego_rl.transport", "receive", "--bind", "tcp://127.0.0.1:*", "--spool", fresh(`${handover}-rx`, dir), "--report", "--quiet", "--credits", "8",
      ...(handover === "consumer" ? ["--handover", "consumer"] : ["--release-consumed"]),
      // The receiver sets glibc's heap thresholds itself (lego_rl/transport/heap.py); this shows the cost without.
      ...(args["plain-malloc"] ? ["--no-tune-malloc"] : []),
    ]);
    const listening = await receiver.waitFor((e) => e.type === "listening");
    // As many unacked batches as the receiver grants credits: more would only queue (and add latency).
    const sender = new Sender({ address: listening.address as string, spoolDir: fresh("sender-spool", dir), producerId: `bench-${handover}`, maxUnackedBatches: 8 });
    return new TransportSession(receiver, sender);
  }

  /** `serial`: wait for each batch's ack before sending the next (latency without queueing). */
  async run(name: string, rows: Trajectory[], perSend: number, serial = false): Promise<TransportResult> {
    senderPeakRss = process.memoryUsage().rss;
    const firstReport = this.batches;
    let bytes = 0;
    const cpuBefore = process.cpuUsage();
    const receiverCpuBefore = this.receiverUsage().cpu_s;
    const started = performance.now();
    for (let i = 0; i < rows.length; i += perSend) {
      for (const header of await this.sender.send(rows.slice(i, i + perSend), ROUTING)) {
        bytes += header.payload_bytes;
        this.batches += 1;
      }
      if (serial) await this.sender.drain(60_000);
    }
    await this.sender.drain(600_000);
    const seconds = (performance.now() - started) / 1000;
    const cpu = process.cpuUsage(cpuBefore);
    const reportCount = this.batches;
    await this.receiver.waitFor(() => this.reports().length >= reportCount);
    const receiverAfter = this.receiverUsage();
    const reports = this.reports().slice(firstReport, reportCount);
    const latencies = reports.map((e) => e.latency_ms as number).sort((a, b) => a - b);
    const tokens = rows.reduce((n, t) => n + trajectoryTokens(t), 0);
    return {
      name, trajectories: rows.length, tokens, bytes, seconds,
      gbps: bytes / seconds / 1e9, tokens_per_s: tokens / seconds,
      p50_ms: quantile(latencies, 0.5), p99_ms: quantile(latencies, 0.99),
      zero_copy: reports.length > 0 && reports.every((e) => e.zero_copy === true),
      sender_peak_rss_mb: senderPeakRss / 2 ** 20, receiver_peak_rss_mb: receiverAfter.peak_rss / 2 ** 20,
      sender_cpu_s: (cpu.user + cpu.system) / 1e6, receiver_cpu_s: receiverAfter.cpu_s - receiverCpuBefore,
    };
  }

  async close(): Promise<void> {
    await this.sender.close();
    this.receiver.stop();
    await this.receiver.waitFor((e) => e.type === "stopped");
  }

  /** The receiver's CPU seconds (user + system, all threads) and peak RSS so far, from /proc (Linux). */
  private receiverUsage(): { cpu_s: number; peak_rss: number } {
    const pid = this.receiver.proc.pid!;
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15, in USER_HZ (100/s).
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return { cpu_s: (Number(fields[11]) + Number(fields[12])) / 100, peak_rss: Number(hwm?.[1] ?? 0) * 1024 };
  }

  private reports(): JsonEvent[] {
    return this.receiver.events.filter((e) => e.type === "report");
  }
}

/** Typed arrays become plain number arrays: what a JSON API would carry. */
function toJson(rows: Trajectory[]): string {
  return JSON.stringify(rows, (_key, value: unknown) => (ArrayBuffer.isView(value) ? Array.from(value as unknown as ArrayLike<number>) : value));
}

async function runJson(name: string, rows: Trajectory[], perPost: number): Promise<{ seconds: number; tokens_per_s: number; json_bytes: number }> {
  const portFile = fresh(`${name}-json.port`);
  const peer = new JsonLineProcess("json-http", PYTHON, ["-m", "lego_rl.transport.bench_peer", "json-http", portFile]);
  const port = await readPort(peer, portFile);
  const agent = new Agent({ keepAlive: true });
  let jsonBytes = 0;
  const started = performance.now();
  for (let i = 0; i < rows.length; i += perPost) {
    const body = toJson(rows.slice(i, i + perPost));
    jsonBytes += Buffer.byteLength(body);
    const last = i + perPost >= rows.length ? "1" : "0";
    await new Promise<void>((resolve, reject) => {
      const req = request({ host: "127.0.0.1", port, method: "POST", path: "/batch", agent, headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body), "X-Last": last } }, (res) => {
        res.resume();
        res.on("end", () => resolve());
      });
      req.on("error", reject);
      req.end(body);
    });
  }
  const seconds = (performance.now() - started) / 1000;
  agent.destroy();
  await peer.waitFor((e) => e.peer === "json-http");
  const tokens = rows.reduce((n, t) => n + trajectoryTokens(t), 0);
  return { seconds, tokens_per_s: tokens / seconds, json_bytes: jsonBytes };
}

/** The floor: the same number of bytes, from one reused buffer, over a plain loopback socket. */
async function runRawTcp(totalBytes: number, chunkBytes: number): Promise<{ gbps: number; seconds: number }> {
  const portFile = fresh("raw.port");
  const peer = new JsonLineProcess("raw-tcp", PYTHON, ["-m", "lego_rl.transport.bench_peer", "raw-tcp", portFile]);
  const port = await readPort(peer, portFile);
  const chunk = Buffer.alloc(chunkBytes, 7);
  const started = performance.now();
  await new Promise<void>((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => {
      let left = totalBytes;
      const pump = (): void => {
        while (left > 0) {
          const n = Math.min(left, chunk.length);
          left -= n;
          if (!socket.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
            socket.once("drain", pump);
            return;
          }
        }
        socket.end();
      };
      pump();
    });
    socket.on("error", reject);
    socket.on("close", () => resolve());
  });
  const done = await peer.waitFor((e) => e.peer === "raw-tcp");
  const seconds = (performance.now() - started) / 1000;
  if (done.bytes !== totalBytes) throw new Error(`raw TCP sink got ${String(done.bytes)} of ${totalBytes} bytes`);
  return { gbps: totalBytes / seconds / 1e9, seconds };
}

function mixedSet(count: number): Trajectory[] {
  // Agent-sized: mostly short tool-use rollouts, a few long ones.
  const sizes = [1_500, 3_000, 3_000, 6_000, 6_000, 12_000, 24_000];
  return Array.from({ length: count }, (_, i) => syntheticTrajectory(`mixed-${i}`, sizes[i % sizes.length]!, ROUTING, 8, i + 1));
}

async function main(): Promise<void> {
  const quick = args.quick!;
  log(`building workloads (routing ${ROUTING.layers} layers x top-${ROUTING.top_k} of ${ROUTING.num_experts}, uint8) ...`);
  // Own arrays per row (until 2026-12-03 every row shared one template's arrays, read cache-hot).
  const big = Array.from({ length: quick ? 12 : 120 }, (_, i) => syntheticTrajectory(`big-${i}`, 32_768, ROUTING, 16, i + 1));
  const mixed = mixedSet(quick ? 42 : 420);

  // The VM is shared and noisy: each throughput figure is the median of REPEATS runs.
  // Warm-up: JIT, spool slots and the receiver heap reach their steady state (a
  // rollout worker and a trainer run for hours); every run of a mode then shares
  // that mode's warm session.
  const consumer = await TransportSession.start("consumer");
  await consumer.run("warmup", big.slice(0, quick ? 3 : 16), 1);
  // Each big run is paired with a raw-TCP run right after it and the ratio is taken per
  // pair: the host's speed drifts by 2x over minutes, so a limit measured at another
  // time says little about this run's.
  const pairs = await repeat(async () => {
    const run = await consumer.run("big", big, 1);
    const limit = await runRawTcp(run.bytes, Math.ceil(run.bytes / run.trajectories));
    return { run, limit, ratio: run.gbps / limit.gbps };
  });
  const bigResult = median(pairs.map((p) => p.run), (r) => r.gbps);
  const raw = median(pairs.map((p) => p.limit), (r) => r.gbps);
  const vsRawTcp = median(pairs, (p) => p.ratio).ratio;
  const mixedResult = median(await repeat(() => consumer.run("mixed", mixed, 8)), (r) => r.gbps);
  const serial = await consumer.run("serial", big.slice(0, quick ? 6 : 12), 1, true);
  await consumer.close();
  const spool = await TransportSession.start("spool");
  await spool.run("warmup", big.slice(0, quick ? 3 : 16), 1);
  const spoolResult = median(await repeat(() => spool.run("big-spool", big, 1)), (r) => r.gbps);
  await spool.close();
  // The labelled second line: the consumer hand-over's big run again, spools on tmpfs.
  let shmResult: TransportResult | null = null;
  if (shmRoot) {
    const shm = await TransportSession.start("consumer", shmRoot);
    await shm.run("warmup", big.slice(0, quick ? 3 : 16), 1);
    shmResult = median(await repeat(() => shm.run("big-shm", big, 1)), (r) => r.gbps);
    await shm.close();
  }
  log(`serial (one batch at a time, 12.9 MB each): p50 ${serial.p50_ms.toFixed(1)} ms, p99 ${serial.p99_ms.toFixed(1)} ms`);
  for (const r of [bigResult, mixedResult, spoolResult, ...(shmResult ? [shmResult] : [])]) {
    log(`${r.name.padEnd(9)} ${r.trajectories} traj ${(r.bytes / 1e6).toFixed(0)} MB in ${r.seconds.toFixed(2)} s: ` +
      `${r.gbps.toFixed(3)} GB/s, ${(r.tokens_per_s / 1e6).toFixed(2)} M tokens/s, p50 ${r.p50_ms.toFixed(1)} ms, p99 ${r.p99_ms.toFixed(1)} ms, ` +
      `zero-copy ${r.zero_copy}, peak RSS sender ${r.sender_peak_rss_mb.toFixed(0)} MB / receiver ${r.receiver_peak_rss_mb.toFixed(0)} MB, ` +
      `CPU sender ${r.sender_cpu_s.toFixed(2)} s / receiver ${r.receiver_cpu_s.toFixed(2)} s`);
  }

  const json = await runJson("big", big.slice(0, 2), 1);
  const jsonMixed = await runJson("mixed", mixed.slice(0, 14), 7);
  log(`json   big: ${(json.tokens_per_s / 1e3).toFixed(1)} k tokens/s (${(json.json_bytes / 1e6).toFixed(0)} MB of JSON in ${json.seconds.toFixed(2)} s); ` +
    `mixed: ${(jsonMixed.tokens_per_s / 1e3).toFixed(1)} k tokens/s`);

  log(`raw    ${(bigResult.bytes / 1e6).toFixed(0)} MB over loopback TCP in ${raw.seconds.toFixed(2)} s: ${raw.gbps.toFixed(3)} GB/s ` +
    `(per pair with a big run: ${pairs.map((p) => `${p.run.gbps.toFixed(2)}/${p.limit.gbps.toFixed(2)} = ${p.ratio.toFixed(3)}`).join(", ")})`);

  clearInterval(rssTimer);
  rmSync(root, { recursive: true, force: true });
  if (shmRoot) rmSync(shmRoot, { recursive: true, force: true });
  const summary = {
    bench: "transport",
    handover: "consumer",
    spool_root: args["spool-root"],
    gbps: round(bigResult.gbps),
    tokens_per_s: Math.round(bigResult.tokens_per_s),
    p50_ms: round(bigResult.p50_ms),
    p99_ms: round(bigResult.p99_ms),
    mixed_gbps: round(mixedResult.gbps),
    mixed_tokens_per_s: Math.round(mixedResult.tokens_per_s),
    mixed_p99_ms: round(mixedResult.p99_ms),
    unloaded_p50_ms: round(serial.p50_ms),
    unloaded_p99_ms: round(serial.p99_ms),
    sender_cpu_s_per_gb: round(bigResult.sender_cpu_s / (bigResult.bytes / 1e9)),
    receiver_cpu_s_per_gb: round(bigResult.receiver_cpu_s / (bigResult.bytes / 1e9)),
    sender_peak_rss_mb: Math.round(Math.max(bigResult.sender_peak_rss_mb, mixedResult.sender_peak_rss_mb)),
    receiver_peak_rss_mb: Math.round(Math.max(bigResult.receiver_peak_rss_mb, mixedResult.receiver_peak_rss_mb)),
    spool_handover_gbps: round(spoolResult.gbps),
    spool_handover_p99_ms: round(spoolResult.p99_ms),
    spool_handover_receiver_cpu_s_per_gb: round(spoolResult.receiver_cpu_s / (spoolResult.bytes / 1e9)),
    spool_handover_sender_cpu_s_per_gb: round(spoolResult.sender_cpu_s / (spoolResult.bytes / 1e9)),
    spool_handover_vs_raw_tcp: round(spoolResult.gbps / raw.gbps),
    shm_root: shmRoot === null ? null : args["shm-root"],
    shm_gbps: shmResult ? round(shmResult.gbps) : null,
    shm_p99_ms: shmResult ? round(shmResult.p99_ms) : null,
    shm_vs_raw_tcp: shmResult ? round(shmResult.gbps / raw.gbps) : null,
    raw_tcp_gbps: round(raw.gbps),
    json_tokens_per_s: Math.round(json.tokens_per_s),
    vs_json: round(bigResult.tokens_per_s / json.tokens_per_s),
    vs_raw_tcp: round(vsRawTcp),
    zero_copy: bigResult.zero_copy && mixedResult.zero_copy && spoolResult.zero_copy,
  };
  console.log(JSON.stringify(summary));
}

const REPEATS = 3;
let runs = 0;
/** A fresh folder or file name under the bench root for each run. */
const fresh = (name: string, dir = root) => join(dir, `${runs++}-${name}`);

async function repeat<T>(run: () => Promise<T>): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < REPEATS; i++) out.push(await run());
  return out;
}

function median<T>(runs: T[], key: (r: T) => number): T {
  return [...runs].sort((a, b) => key(a) - key(b))[Math.floor(runs.length / 2)]!;
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

await main();
