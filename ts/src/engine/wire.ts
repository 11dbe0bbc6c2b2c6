/**
 * How control frames (schemas/records.toml, msgpack) travel between the proxy and
 * the Python engine: one frame per message, in order, both ways.
 *
 * - `tcp://…` and `ipc://…`: a ZeroMQ DEALER (the engine binds a ROUTER). libzmq
 *   reconnects by itself, queues what is sent before the engine is up, and its
 *   ZMTP heartbeats notice an engine that stopped answering without closing.
 * - `unix:///path`: a Unix stream socket, each frame a 4-byte big-endian length
 *   then its bytes (docs/model.md "Serving over a Unix socket"). For an engine on
 *   the same host: a message is one write and one read in the two processes,
 *   where ZeroMQ hands it through an I/O thread on each side (two more thread
 *   wake-ups per message, which is most of a hop's time on a small, busy host).
 *   A dead engine process closes the socket, so it is noticed at once; the wire
 *   reconnects every `reconnectMs` and holds frames sent meanwhile until it is
 *   back (as ZeroMQ does, up to MAX_HELD_FRAMES; more are refused). An engine
 *   that stops without exiting is not noticed (no heartbeats): ZeroMQ's are.
 */
import { connect, type Socket } from "node:net";
import { Dealer } from "zeromq";

export interface WireEvents {
  frame(bytes: Uint8Array): void;
  connect(): void;
  disconnect(): void;
  /** The wire cannot go on (a receive loop failed); requests in flight are lost. */
  failed(error: Error): void;
}

export interface ControlWire {
  /** Resolves once the frame is handed to the transport (queued while disconnected). */
  send(bytes: Uint8Array): Promise<void>;
  close(): void;
}

/** The largest frame a stream wire accepts: a bigger length prefix means the stream is corrupt. */
export const MAX_STREAM_FRAME_BYTES = 1 << 30;
/** Frames a disconnected stream wire holds at most (ZeroMQ's default high-water mark is the same). */
export const MAX_HELD_FRAMES = 1000;
const UNIX = /^unix:\/\/(\/.+)$/;
const ZMQ = /^(tcp|ipc):\/\/./;

/** Whether `address` names an engine's control endpoint (ZeroMQ or a Unix socket), not a scripted engine's name. */
export function isControlAddress(address: string): boolean {
  return UNIX.test(address) || ZMQ.test(address);
}

/** The wire for `address` (module doc). */
export function openWire(address: string, events: WireEvents, reconnectMs = 100): ControlWire {
  const unix = UNIX.exec(address);
  if (unix) return new StreamWire(unix[1]!, events, reconnectMs);
  if (ZMQ.test(address)) return new ZmqWire(address, events);
  throw new RangeError(`engine address ${JSON.stringify(address)}: expected tcp://HOST:PORT or ipc://PATH (ZeroMQ) or unix:///PATH (a Unix socket)`);
}

class ZmqWire implements ControlWire {
  // ZMTP heartbeats: an engine that stops answering without closing its connection (a stopped process,
  // a host gone) is noticed within seconds, so requests in flight fail instead of hanging the turn.
  private readonly socket = new Dealer({ linger: 0, heartbeatInterval: 1000, heartbeatTimeout: 5000 });
  private tail: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly address: string,
    private readonly events: WireEvents,
  ) {
    this.socket.events.on("disconnect", () => events.disconnect());
    this.socket.events.on("connect", () => events.connect());
    // Unsent messages wait for the connection (no `immediate`), so the client may start before the engine binds.
    this.socket.connect(address);
    void this.receive();
  }

  /** zeromq.js allows one pending send per socket: sends queue here, in call order. */
  send(bytes: Uint8Array): Promise<void> {
    const sent = this.tail.then(() => this.socket.send(bytes));
    this.tail = sent.catch(() => undefined);
    return sent;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    // Frames already queued go first (an abort on the way out), but not forever: a send to an
    // engine that never came up waits for room that never comes, and would keep the socket open.
    const grace = new Promise<void>((resolve) => setTimeout(resolve, 100).unref());
    void Promise.race([this.tail, grace]).then(() => this.socket.close());
  }

  private async receive(): Promise<void> {
    try {
      for await (const frames of this.socket) {
        if (frames.length !== 1) {
          this.events.frame(new Uint8Array(0)); // unreadable: the caller counts it
          continue;
        }
        this.events.frame(frames[0]!);
      }
    } catch (error) {
      if (!this.closed) this.events.failed(new Error(`receiving from ${this.address} failed: ${(error as Error).message}`, { cause: error }));
    }
  }
}

class StreamWire implements ControlWire {
  private socket: Socket | null = null;
  private connected = false;
  private closed = false;
  /** Frames sent while disconnected, written in order once connected. */
  private held: Buffer[] = [];
  private readonly reader = new FrameReader((frame) => this.events.frame(frame));
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly path: string,
    private readonly events: WireEvents,
    private readonly reconnectMs: number,
  ) {
    this.open();
  }

  send(bytes: Uint8Array): Promise<void> {
    if (this.closed) return Promise.reject(new Error(`the wire to unix://${this.path} is closed`));
    const [head, body] = frameBytes(bytes) as [Buffer, Buffer];
    if (!this.connected) {
      if (this.held.length / 2 >= MAX_HELD_FRAMES)
        return Promise.reject(new Error(`unix://${this.path} is not connected and already holds ${MAX_HELD_FRAMES} frames; is the engine running?`));
      this.held.push(head, body);
      return Promise.resolve();
    }
    // Small frames go out as one buffer (one segment, one read on the other side); big ones are not copied.
    if (bytes.length <= 16 * 1024) this.socket!.write(Buffer.concat([head, body]));
    else {
      this.socket!.cork();
      this.socket!.write(head);
      this.socket!.write(body);
      this.socket!.uncork();
    }
    return Promise.resolve();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    // What is written goes out first (an abort on the way out); an engine that stopped reading gets a second.
    const socket = this.socket;
    socket?.end(() => socket.destroy());
    if (socket) setTimeout(() => socket.destroy(), 1000).unref();
    this.socket = null;
  }

  private open(): void {
    const socket = connect(this.path);
    this.socket = socket;
    socket.on("connect", () => {
      if (this.closed) return void socket.destroy();
      this.connected = true;
      const held = this.held;
      this.held = [];
      if (held.length > 0) socket.write(Buffer.concat(held));
      this.events.connect();
    });
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("error", () => undefined); // "close" follows and says what matters: the connection is gone
    socket.on("close", () => {
      const was = this.connected;
      this.connected = false;
      this.reader.reset();
      if (this.socket === socket) this.socket = null;
      if (was) this.events.disconnect();
      if (!this.closed) this.timer = setTimeout(() => this.open(), this.reconnectMs);
    });
  }

  private onData(chunk: Buffer): void {
    try {
      this.reader.push(chunk);
    } catch (error) {
      this.socket?.destroy();
      this.events.failed(new Error(`unix://${this.path}: ${(error as Error).message}`));
    }
  }
}

/** One length-prefixed frame as written to a stream (module doc). */
export function frameBytes(bytes: Uint8Array): Buffer[] {
  const head = Buffer.allocUnsafe(4);
  head.writeUInt32BE(bytes.length, 0);
  return [head, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length)];
}

/** Cuts a byte stream into length-prefixed frames, calling `frame` with each whole one. */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;

  constructor(private readonly frame: (bytes: Uint8Array) => void) {}

  /** Throws when a length prefix is over MAX_STREAM_FRAME_BYTES: the stream is not control frames. */
  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    for (;;) {
      if (this.buffered < 4) return;
      let first = this.chunks[0]!;
      if (first.length < 4) {
        first = Buffer.concat(this.chunks);
        this.chunks = [first];
      }
      const length = first.readUInt32BE(0);
      if (length > MAX_STREAM_FRAME_BYTES) throw new RangeError(`a frame length of ${length} bytes (over ${MAX_STREAM_FRAME_BYTES}): not a control-frame stream`);
      if (this.buffered < 4 + length) return;
      if (first.length < 4 + length) {
        first = Buffer.concat(this.chunks);
        this.chunks = [first];
      }
      const rest = first.subarray(4 + length);
      this.buffered -= 4 + length;
      if (rest.length > 0) this.chunks[0] = rest;
      else this.chunks.shift();
      this.frame(first.subarray(4, 4 + length));
    }
  }

  reset(): void {
    this.chunks = [];
    this.buffered = 0;
  }
}
