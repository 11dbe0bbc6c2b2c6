/**
 * The sending half of the data plane: Trajectories -> durable spool -> ZeroMQ.
 *
 * Delivery contract (docs/transport.md):
 * 1. Every batch is written to the spool (fsync + rename) before it is sent.
 * 2. It leaves the spool only when the receiver acks it, which the receiver
 *    does only after handing it over durably; the batch id makes redelivery
 *    idempotent, so the effect is exactly-once.
 * 3. On every (re)connection the sender says hello, forgets its credits and
 *    requeues whatever was in flight; the receiver answers with fresh credits.
 * 4. A batch goes out only against a credit the receiver granted. Memory is
 *    bounded by `memoryHighWaterBytes` of queued payloads (the rest is re-read
 *    from the spool when its turn comes) plus in-flight batches, which the
 *    receiver's credit window bounds; `send` waits once `maxUnackedBatches`
 *    batches are unacknowledged, so a slow receiver slows the producer down.
 *
 * The receiver also tells its senders which policy version the trainer has
 * published (`WeightVersion`, on publication and on every hello):
 * `policyVersion` / `waitForPolicyVersion` let a rollout worker enforce its
 * staleness bound.
 */
import { randomBytes } from "node:crypto";
import { Dealer } from "zeromq";
import {
  decodeControl, encodeControl, type BatchHeader, type ControlMessage, type RoutingShape, type Trajectory, type WeightVersion,
} from "../schema/index.ts";
import { DEFAULT_MAX_BATCH_BYTES, frameTrajectoryBatch, planBatches } from "./batcher.ts";
import { SenderClosedError, TransportTimeoutError } from "./errors.ts";
import { PayloadPool, ScratchArena } from "./ipc-frame.ts";
import { Spool, type SpoolEntry } from "./spool.ts";

export interface SenderConfig {
  /** Receiver address, e.g. tcp://127.0.0.1:5555 or ipc:///tmp/lego.sock. */
  readonly address: string;
  /** Spool folder; batches found there at start are resent. */
  readonly spoolDir: string;
  /** Stable name of this rollout worker; part of every batch id. */
  readonly producerId: string;
  /** Unacknowledged batches (queued + in flight) after which `send` waits. Default 32. */
  readonly maxUnackedBatches?: number;
  /** Queued payload bytes kept in memory; beyond it payloads are re-read from the spool. Default 128 MiB. */
  readonly memoryHighWaterBytes?: number;
  /** Target size of one batch (see batcher.ts). Default 16 MiB. */
  readonly maxBatchBytes?: number;
  /** Write batches into mapped spool pages when the native module is loaded (default true; false: write(), one more copy). */
  readonly fileMapping?: boolean;
  /** Run the schema checks before spooling (default false: the receiver validates and quarantines). */
  readonly validate?: boolean;
  /** Called for every state change; the CLI and the tests print these as JSON lines. */
  readonly onEvent?: (event: SenderEvent) => void;
}

/** The sender's defaults, in one place (what `SenderConfig` leaves out). */
export const SENDER_DEFAULTS = {
  maxUnackedBatches: 32,
  memoryHighWaterBytes: 128 * 1024 * 1024,
  maxBatchBytes: DEFAULT_MAX_BATCH_BYTES,
  fileMapping: true,
} as const;

export type SenderEvent =
  | { type: "connected" }
  | { type: "disconnected" }
  | { type: "spooled"; batch_id: string; num_trajectories: number; payload_bytes: number }
  | { type: "credit"; credits: number }
  | { type: "acked"; batch_id: string; status: string; reason: string | null }
  | { type: "bad_frame"; detail: string }
  | { type: "receiver_error"; code: string; message: string; batch_id: string | null }
  | { type: "weight_version"; version: number; published_at_ms: number; checkpoint_path: string | null };

export interface SenderStats {
  spooled: number;
  sent: number;
  resent: number;
  accepted: number;
  duplicates: number;
  quarantined: number;
  badFrames: number;
  credits: number;
  queued: number;
  inFlight: number;
  heldBytes: number;
  peakHeldBytes: number;
  sentBytes: number;
}

interface Outgoing {
  readonly entry: SpoolEntry;
  readonly headerBytes: Uint8Array;
  /** Null when the payload lives only in the spool (over the memory high-water mark). */
  payload: Uint8Array | null;
  /** The pool buffer that was sent; back to the pool on ack (ZeroMQ sends large frames without copying). */
  pooled: Uint8Array | null;
  sent: boolean;
}

export class Sender {
  private readonly spool: Spool;
  private readonly pool: PayloadPool;
  private readonly scratch = new ScratchArena();
  private readonly socket: Dealer;
  private readonly queue: Outgoing[] = [];
  private readonly inFlight = new Map<string, Outgoing>();
  private readonly waiters = new Set<() => void>();
  private readonly maxUnacked: number;
  private readonly highWater: number;
  private readonly maxBatchBytes: number;
  private seq: number;
  private latestPolicy: WeightVersion | null = null;
  /** WeightVersion messages received, repeats included (see waitUntilTrained). */
  private announcements = 0;
  /** Per batch acked and not yet asked about: `announcements` when its ack came (-1: quarantined, never trained). */
  private readonly announcementsAtAck = new Map<string, number>();
  private connected = false;
  private helloDue = false;
  private pumping = false;
  private closed = false;
  private readonly counters: SenderStats = {
    spooled: 0, sent: 0, resent: 0, accepted: 0, duplicates: 0, quarantined: 0, badFrames: 0,
    credits: 0, queued: 0, inFlight: 0, heldBytes: 0, peakHeldBytes: 0, sentBytes: 0,
  };

  constructor(private readonly config: SenderConfig) {
    this.maxUnacked = config.maxUnackedBatches ?? SENDER_DEFAULTS.maxUnackedBatches;
    this.highWater = config.memoryHighWaterBytes ?? SENDER_DEFAULTS.memoryHighWaterBytes;
    this.maxBatchBytes = config.maxBatchBytes ?? SENDER_DEFAULTS.maxBatchBytes;
    this.spool = new Spool(config.spoolDir, undefined, config.fileMapping ?? SENDER_DEFAULTS.fileMapping);
    // Payload buffers live until their ack; the pool holds what the high-water mark allows.
    this.pool = new PayloadPool(Math.max(2, Math.floor(this.highWater / this.maxBatchBytes)));
    // Batch ids must never repeat across restarts, even once the spool is empty.
    this.seq = Date.now() * 1000;
    for (const entry of this.spool.list()) {
      this.seq = Math.max(this.seq, entry.header.seq + 1);
      this.enqueue(entry, encodeControl(entry.header), null);
    }
    // immediate: never queue a batch on a connection that is not up yet; the
    // send waits instead, and the hello on (re)connection restarts the flow.
    // ZMTP heartbeats: a receiver that vanished without closing its TCP connection
    // (host down, cable cut) is noticed within seconds, which triggers reconnect + resend.
    this.socket = new Dealer({
      immediate: true, linger: 0, reconnectInterval: 100, reconnectMaxInterval: 1000, sendHighWaterMark: 4,
      heartbeatInterval: 1000, heartbeatTimeout: 5000,
    });
    this.socket.events.on("connect", () => this.onConnect());
    this.socket.events.on("disconnect", () => this.onDisconnect());
    this.socket.connect(config.address);
    void this.receiveLoop();
  }

  /** Batches spooled but not yet acknowledged (resent after a restart). */
  get unacked(): number {
    return this.queue.length + this.inFlight.size;
  }

  /** The newest policy version the receiver announced (null until one arrives). */
  get policyVersion(): WeightVersion | null {
    return this.latestPolicy;
  }

  /**
   * Resolves with the announced policy once its version is at least `minVersion`
   * (at once if it already is): a rollout worker that may run at most k versions
   * behind waits here for `version - k` before starting a rollout.
   */
  async waitForPolicyVersion(minVersion: number, timeoutMs?: number): Promise<WeightVersion> {
    try {
      await this.waitFor(() => (this.latestPolicy?.version ?? -Infinity) >= minVersion, timeoutMs);
    } catch (error) {
      if (!(error instanceof TransportTimeoutError)) throw error;
      const seen = this.latestPolicy ? `version ${this.latestPolicy.version}` : "no version";
      throw new TransportTimeoutError(`sender ${this.config.producerId}: policy version ${minVersion} not announced by ${this.config.address} within ${timeoutMs} ms (${seen} so far)`);
    }
    return this.latestPolicy!;
  }

  /**
   * Resolves once every batch in `batchIds` is acknowledged and the receiver has announced the
   * trainer's policy version at least once since the last of those acks. The trainer's loop
   * (lego_rl.trainer.driver) announces after every step, an update or not, once the new weights
   * are published, and its receiver acks a batch only when the loop asks for the next one, after
   * the previous step's announcement: so that announcement comes from the step that consumed
   * the batch (or a later one). A rollout worker running on-policy waits here before its next
   * group. A quarantined batch trains nowhere and counts as done. After a reconnection the
   * receiver announces again on hello, which also counts: the next group may then start one
   * step early (the trainer's `batch/staleness_*` metrics show it).
   */
  async waitUntilTrained(batchIds: readonly string[], timeoutMs?: number): Promise<void> {
    const acked = () => batchIds.every((id) => this.announcementsAtAck.has(id));
    const after = () => Math.max(-1, ...batchIds.map((id) => this.announcementsAtAck.get(id)!));
    try {
      await this.waitFor(() => acked() && this.announcements > after(), timeoutMs);
    } catch (error) {
      if (!(error instanceof TransportTimeoutError)) throw error;
      throw new TransportTimeoutError(`sender ${this.config.producerId}: ${acked() ? "no policy version announced after the acks of" : "no ack for"} ` +
        `${batchIds.join(", ")} from ${this.config.address} within ${timeoutMs} ms (is the trainer running?)`);
    } finally {
      for (const id of batchIds) this.announcementsAtAck.delete(id);
    }
  }

  stats(): SenderStats {
    return { ...this.counters, queued: this.queue.length, inFlight: this.inFlight.size };
  }

  /** Splits, encodes and spools `trajectories`, waiting before each batch while `maxUnackedBatches` are unacknowledged; resolves once all are on disk. */
  async send(trajectories: readonly Trajectory[], routing: RoutingShape | null): Promise<BatchHeader[]> {
    const headers: BatchHeader[] = [];
    for (const rows of planBatches(trajectories, routing, this.maxBatchBytes)) {
      await this.waitFor(() => this.unacked < this.maxUnacked);
      const seq = this.seq++;
      const batchId = `${this.config.producerId}-${seq}-${randomBytes(3).toString("hex")}`;
      const identity = { batchId, producerId: this.config.producerId, seq };
      const spooled = frameTrajectoryBatch(rows, routing, identity, this.config.validate ?? false, this.scratch, ({ header, writeTo }) => {
        // Straight into the spool file's mapped pages when the native mapping is there; else via a pooled buffer.
        const inPlace = this.spool.appendInPlace(header, writeTo);
        if (inPlace) return { ...inPlace, pooled: false };
        const payload = this.pool.acquire(header.payload_bytes);
        writeTo(payload);
        return { entry: this.spool.append(header, payload), payload, pooled: true };
      });
      this.queueSpooled(spooled.entry, spooled.payload, spooled.pooled);
      headers.push(spooled.entry.header);
    }
    return headers;
  }

  /** Spools and sends an already encoded batch (e.g. from another spool, `lego transport send`). */
  async sendEncoded(header: BatchHeader, payload: Uint8Array): Promise<void> {
    await this.waitFor(() => this.unacked < this.maxUnacked);
    this.seq = Math.max(this.seq, header.seq + 1);
    this.spoolAndQueue(header, payload);
  }

  /** Resolves when every spooled batch has been acknowledged. */
  async drain(timeoutMs?: number): Promise<void> {
    await this.waitFor(() => this.unacked === 0, timeoutMs);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.socket.close();
    this.spool.close();
    this.notify();
  }

  private spoolAndQueue(header: BatchHeader, payload: Uint8Array): void {
    this.queueSpooled(this.spool.append(header, payload), payload, false);
  }

  /** `payload` is a pool buffer (`pooled`), the spool file's mapped pages, or the caller's. */
  private queueSpooled(entry: SpoolEntry, payload: Uint8Array, pooled: boolean): void {
    const header = entry.header;
    this.counters.spooled += 1;
    this.emit({ type: "spooled", batch_id: header.batch_id, num_trajectories: header.num_trajectories, payload_bytes: header.payload_bytes });
    this.enqueue(entry, encodeControl(header), payload, pooled);
    void this.pump();
  }

  private enqueue(entry: SpoolEntry, headerBytes: Uint8Array, payload: Uint8Array | null, pooled = false): void {
    const keep = payload !== null && this.counters.heldBytes + payload.length <= this.highWater;
    if (keep) this.hold(payload.length);
    else if (payload !== null && pooled) this.pool.release(payload); // on disk only: the buffer is free again
    this.queue.push({ entry, headerBytes, payload: keep ? payload : null, pooled: keep && pooled ? payload : null, sent: false });
  }

  private hold(bytes: number): void {
    this.counters.heldBytes += bytes;
    this.counters.peakHeldBytes = Math.max(this.counters.peakHeldBytes, this.counters.heldBytes);
  }

  private onConnect(): void {
    this.connected = true;
    this.emit({ type: "connected" });
    // Whatever was in flight may have died with the old connection: send it
    // again (the receiver deduplicates) against the new receiver's credits.
    const back = [...this.inFlight.values()];
    this.inFlight.clear();
    // A frame on the dead connection may still reference its buffer: never reuse those.
    for (const item of back) item.pooled = null;
    this.queue.unshift(...back.sort((a, b) => a.entry.header.seq - b.entry.header.seq));
    this.counters.credits = 0;
    this.helloDue = true;
    void this.pump();
  }

  private onDisconnect(): void {
    this.connected = false;
    this.counters.credits = 0;
    this.emit({ type: "disconnected" });
  }

  /** The only place that writes to the socket: zeromq.js allows one pending send per socket. */
  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (!this.closed) {
        if (this.helloDue) {
          this.helloDue = false;
          const hello: ControlMessage = { kind: "heartbeat", sender_id: this.config.producerId, role: "sender", sent_at_ms: Date.now() };
          await this.socket.send(encodeControl(hello));
          continue;
        }
        if (!this.connected || this.counters.credits <= 0 || this.queue.length === 0) break;
        const item = this.queue.shift()!;
        this.counters.credits -= 1;
        const payload = item.payload ?? this.spool.read(item.entry).payload;
        if (item.payload) {
          this.counters.heldBytes -= item.payload.length;
          item.payload = null;
        }
        this.inFlight.set(item.entry.header.batch_id, item);
        if (item.sent) this.counters.resent += 1;
        item.sent = true;
        await this.socket.send([item.headerBytes, payload]);
        this.counters.sent += 1;
        this.counters.sentBytes += payload.length;
      }
    } catch (error) {
      if (!this.closed) throw error;
    } finally {
      this.pumping = false;
    }
  }

  private async receiveLoop(): Promise<void> {
    try {
      for await (const frames of this.socket) this.onReply(frames);
    } catch (error) {
      if (!this.closed) throw error;
    }
  }

  private onReply(frames: Buffer[]): void {
    let message: ControlMessage;
    try {
      if (frames.length !== 1) throw new Error(`expected 1 control frame, got ${frames.length}`);
      message = decodeControl(frames[0]!);
    } catch (error) {
      // A reply we cannot read is counted and dropped; the batch it concerned
      // stays spooled and goes out again on the next connection.
      this.counters.badFrames += 1;
      this.emit({ type: "bad_frame", detail: (error as Error).message });
      return;
    }
    switch (message.kind) {
      case "credit":
        this.counters.credits += message.credits;
        this.emit({ type: "credit", credits: message.credits });
        void this.pump();
        return;
      case "ack":
        this.onAck(message.batch_id, message.status, message.reason);
        return;
      case "error":
        this.emit({ type: "receiver_error", code: message.code, message: message.message, batch_id: message.batch_id });
        return;
      case "weight_version":
        this.announcements += 1;
        this.notify();
        // Announced on publication and again on every hello: keep the newest.
        if (this.latestPolicy !== null && message.version <= this.latestPolicy.version) return;
        this.latestPolicy = message;
        this.emit({ type: "weight_version", version: message.version, published_at_ms: message.published_at_ms, checkpoint_path: message.checkpoint_path });
        this.notify();
        return;
      default:
        this.counters.badFrames += 1;
        this.emit({ type: "bad_frame", detail: `unexpected ${message.kind} message from the receiver` });
    }
  }

  private onAck(batchId: string, status: string, reason: string | null): void {
    let item = this.inFlight.get(batchId);
    if (item) this.inFlight.delete(batchId);
    else {
      // An ack for a batch requeued after a reconnect: it needs no resend.
      const index = this.queue.findIndex((q) => q.entry.header.batch_id === batchId);
      if (index < 0) return; // already acked (an ack for a redelivered duplicate)
      item = this.queue.splice(index, 1)[0]!;
      if (item.payload) this.counters.heldBytes -= item.payload.length;
    }
    if (item.pooled) this.pool.release(item.pooled);
    item.pooled = null;
    this.announcementsAtAck.set(batchId, status === "quarantined" ? -1 : this.announcements);
    // Only the newest acks are ever asked about (a worker waits on the group it just shipped): keep memory flat.
    if (this.announcementsAtAck.size > 1024) this.announcementsAtAck.delete(this.announcementsAtAck.keys().next().value!);
    if (status === "quarantined") {
      this.counters.quarantined += 1;
      this.spool.quarantine(item.entry, reason ?? "(no reason given)");
    } else {
      if (status === "duplicate") this.counters.duplicates += 1;
      else this.counters.accepted += 1;
      this.spool.remove(item.entry);
    }
    this.emit({ type: "acked", batch_id: batchId, status, reason });
    this.notify();
  }

  private emit(event: SenderEvent): void {
    this.config.onEvent?.(event);
  }

  private notify(): void {
    for (const wake of [...this.waiters]) wake();
  }

  private async waitFor(ready: () => boolean, timeoutMs?: number): Promise<void> {
    const deadline = timeoutMs === undefined ? Infinity : Date.now() + timeoutMs;
    while (!ready()) {
      if (this.closed) throw new SenderClosedError(`sender ${this.config.producerId} closed with ${this.unacked} batches unacknowledged (they stay spooled)`);
      const left = deadline - Date.now();
      if (left <= 0) throw new TransportTimeoutError(`sender ${this.config.producerId}: ${this.unacked} batches still unacknowledged by ${this.config.address} after ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer);
          this.waiters.delete(done);
          resolve();
        };
        const timer = Number.isFinite(left) ? setTimeout(done, left) : undefined;
        this.waiters.add(done);
      });
    }
  }
}
