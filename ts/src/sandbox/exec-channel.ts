/**
 * The host's end of in-container/execd.c: commands go to the container's main
 * process over its attach stream, so each costs a fork there instead of a
 * `runc exec` (~40 ms to the first byte on a 2-core host).
 *
 * Frames, both ways: type (1 byte), command id (u32 LE), payload length (u32
 * LE), payload. To execd: 'R' run (payload described at execd.c's `run`),
 * 'K' kill the command's process group. From execd, on its stdout: 'O' / 'E'
 * a chunk of the command's stdout / stderr, 'X' it ended (exit status u32, then
 * one byte "stopped by its deadline or held past it", one byte "held": its
 * output stayed open a grace period after the deadline), 'F' it could not be
 * started (the reason as text). Docker multiplexes execd's stdout and stderr
 * on the attach stream; execd's stderr carries only its own complaints.
 */
import type Docker from "dockerode";
import type { Duplex } from "node:stream";

export interface ChannelRequest {
  argv: string[];
  uid: number;
  gid: number;
  env: Record<string, string>;
  /** "" keeps the container's working directory. */
  workdir: string;
  /** 0: no deadline. */
  timeoutMs: number;
  /** How long past the deadline execd waits for output held open by a process that left the command's group. */
  graceMs: number;
  stdin?: Buffer;
}

export interface ChannelResult {
  exitCode: number;
  /** execd stopped it at its deadline, or stopped waiting for its output after the grace period. */
  timedOut: boolean;
}

interface Pending {
  onStdout: (chunk: Buffer) => void;
  onStderr: (chunk: Buffer) => void;
  resolve: (r: ChannelResult) => void;
  reject: (e: Error) => void;
}

/** Largest stdin a request carries (execd refuses frames over 64 MiB). */
export const MAX_CHANNEL_STDIN = 32 << 20;
const HEADER = 9;

function frame(type: string, id: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(HEADER);
  head.write(type, 0, "latin1");
  head.writeUInt32LE(id, 1);
  head.writeUInt32LE(payload.length, 5);
  return Buffer.concat([head, payload]);
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
}

function str(s: string): Buffer {
  const bytes = Buffer.from(s, "utf8");
  if (bytes.includes(0)) throw new Error(`a command's argument, variable or directory holds a NUL byte: ${JSON.stringify(s.slice(0, 80))}`);
  return Buffer.concat([u32(bytes.length), bytes]);
}

export function encodeRun(id: number, req: ChannelRequest): Buffer {
  if (req.argv.length === 0) throw new Error("a command needs at least its program");
  if (req.stdin && req.stdin.length > MAX_CHANNEL_STDIN) throw new Error(`stdin of ${req.stdin.length} bytes is over the ${MAX_CHANNEL_STDIN}-byte limit; copy a file in with putFiles instead`);
  for (const [what, ms] of [["timeout", req.timeoutMs], ["grace period", req.graceMs]] as const) {
    if (!Number.isInteger(ms) || ms < 0 || ms > 0xffffffff) throw new Error(`a command's ${what} of ${ms} ms is out of range (a whole number of ms, at most ~49 days)`);
  }
  for (const k of Object.keys(req.env)) {
    if (!k || k.includes("=")) throw new Error(`environment variable name ${JSON.stringify(k)} is empty or holds '='`);
  }
  const env = Object.entries(req.env).map(([k, v]) => `${k}=${v}`);
  const parts = [
    u32(req.uid), u32(req.gid), u32(req.timeoutMs), u32(req.graceMs), u32(req.argv.length), u32(env.length),
    ...req.argv.map(str), ...env.map(str), str(req.workdir),
    u32(req.stdin ? 1 : 0), ...(req.stdin ? [req.stdin] : []),
  ];
  return frame("R", id, Buffer.concat(parts));
}

export class ExecChannel {
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private buf: Buffer = Buffer.alloc(0);
  private closedWith: Error | undefined;
  /** What execd said on its stderr (its own failures), for error messages. */
  private complaints = "";

  private constructor(private readonly stream: Duplex) {
    const demuxed = demux(
      (c) => this.take(c),
      (c) => (this.complaints = (this.complaints + c.toString("utf8")).slice(-2000)),
    );
    this.stream.on("data", (chunk: Buffer) => {
      if (this.closedWith) return;
      try {
        demuxed(chunk);
      } catch (e) {
        // A stream we cannot read is a lost channel: its commands fail, the process goes on.
        this.fail(e instanceof Error ? e : new Error(String(e)));
        this.stream.destroy();
      }
    });
    this.stream.on("end", () => this.fail(new Error("the container's command stream ended")));
    this.stream.on("close", () => this.fail(new Error("the container's command stream closed")));
    this.stream.on("error", (e: Error) => this.fail(e));
  }

  /** Attaches to a created (not yet started) container whose main process is execd. */
  static async attach(container: Docker.Container): Promise<ExecChannel> {
    const stream = (await container.attach({ stream: true, stdin: true, stdout: true, stderr: true, hijack: true })) as unknown as Duplex;
    return ExecChannel.over(stream);
  }

  /** A channel over any duplex that speaks Docker's multiplexed attach stream to execd. */
  static over(stream: Duplex): ExecChannel {
    return new ExecChannel(stream);
  }

  /** Runs one command; resolves when it ended and its output was delivered. */
  run(req: ChannelRequest, onStdout: (c: Buffer) => void, onStderr: (c: Buffer) => void): { id: number; done: Promise<ChannelResult> } {
    const id = this.nextId;
    this.nextId = (this.nextId % 0xffffffff) + 1;
    const bytes = encodeRun(id, req); // throws on bad input before anything is sent
    const done = new Promise<ChannelResult>((resolve, reject) => {
      if (this.closedWith) return reject(this.closedWith);
      this.pending.set(id, { onStdout, onStderr, resolve, reject });
      this.stream.write(bytes);
    });
    done.catch(() => {}); // a caller that stopped waiting (kill) does not hear of a later close
    return { id, done };
  }

  /** Kills a command's process group (the host gave up waiting for it). */
  kill(id: number): void {
    this.pending.delete(id);
    if (!this.closedWith) this.stream.write(frame("K", id, Buffer.alloc(0)));
  }

  close(): void {
    this.fail(new Error("the sandbox closed its command stream"));
    this.stream.destroy();
  }

  private fail(e: Error): void {
    if (this.closedWith) return;
    const said = this.complaints.trim();
    this.closedWith = said ? new Error(`${e.message} (execd: ${said})`, { cause: e }) : e;
    for (const p of this.pending.values()) p.reject(this.closedWith);
    this.pending.clear();
  }

  private take(chunk: Buffer): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, chunk]) : chunk;
    let off = 0;
    while (this.buf.length - off >= HEADER) {
      const type = String.fromCharCode(this.buf[off]!);
      const id = this.buf.readUInt32LE(off + 1);
      const len = this.buf.readUInt32LE(off + 5);
      if (this.buf.length - off - HEADER < len) break;
      const payload = this.buf.subarray(off + HEADER, off + HEADER + len);
      off += HEADER + len;
      const p = this.pending.get(id);
      if (!"OEXF".includes(type)) throw new Error(`execd sent a frame of unknown type ${JSON.stringify(type)}: the command stream is corrupt`);
      if (!p) continue; // a command we stopped waiting for
      if (type === "O") p.onStdout(payload);
      else if (type === "E") p.onStderr(payload);
      else if (type === "X") {
        if (len !== 6) throw new Error(`execd sent a ${len}-byte exit frame (6 expected): the command stream is corrupt`);
        this.pending.delete(id);
        p.resolve({ exitCode: payload.readUInt32LE(0), timedOut: payload[4] === 1 });
      } else if (type === "F") {
        this.pending.delete(id);
        p.reject(new Error(`execd could not start the command: ${payload.toString("utf8")}`));
      }
    }
    this.buf = off === this.buf.length ? Buffer.alloc(0) : this.buf.subarray(off);
  }
}

/**
 * Docker's stream multiplexing (non-TTY attach): 8-byte headers naming stdout (1) or stderr (2)
 * and a length. Returns the function to feed each chunk to; a header naming anything else throws.
 */
function demux(onStdout: (c: Buffer) => void, onStderr: (c: Buffer) => void): (chunk: Buffer) => void {
  let buf: Buffer = Buffer.alloc(0);
  return (chunk: Buffer) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    let off = 0;
    while (buf.length - off >= 8) {
      const len = buf.readUInt32BE(off + 4);
      if (buf.length - off - 8 < len) break;
      const body = buf.subarray(off + 8, off + 8 + len);
      const kind = buf[off];
      if (kind !== 1 && kind !== 2) throw new Error(`the attach stream named stream ${kind} (1 or 2 expected): it is not Docker's multiplexed stream`);
      off += 8 + len;
      (kind === 2 ? onStderr : onStdout)(body);
    }
    buf = off === buf.length ? Buffer.alloc(0) : buf.subarray(off);
  };
}
