import Docker from "dockerode";
import { PassThrough, type Readable } from "node:stream";

let shared: Docker | undefined;

/** One dockerode client per process (DOCKER_HOST or the default socket). */
export function dockerClient(): Docker {
  shared ??= new Docker();
  return shared;
}

/** Reads a stream fully into a Buffer; past `maxBytes` it stops and returns undefined. */
export async function readAll(stream: Readable, maxBytes = Number.POSITIVE_INFINITY): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of stream) {
    const b = Buffer.isBuffer(c) ? c : Buffer.from(c);
    n += b.length;
    if (n > maxBytes) {
      stream.destroy();
      return undefined;
    }
    chunks.push(b);
  }
  return Buffer.concat(chunks);
}

/**
 * Follows a daemon progress stream (build, import) to its end and throws on
 * the first `error` record, which the daemon sends with HTTP 200.
 */
export async function followProgress(docker: Docker, stream: unknown): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const lines: string[] = [];
    docker.modem.followProgress(
      stream as NodeJS.ReadableStream,
      (err: Error | null, out: Array<{ error?: string; stream?: string; status?: string }>) => {
        if (err) return reject(err);
        const failed = out.find((o) => o.error);
        if (failed) return reject(new Error(failed.error));
        for (const o of out) if (o.stream ?? o.status) lines.push(String(o.stream ?? o.status));
        resolve(lines);
      },
    );
  });
}

/** A demultiplexer that splits Docker's stdout/stderr frame stream into two capped buffers. */
export class CappedOutput {
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  private out: Buffer[] = [];
  private err: Buffer[] = [];
  private outLen = 0;
  private errLen = 0;
  truncated = false;

  constructor(readonly capBytes: number) {
    this.stdout.on("data", (c: Buffer) => this.push(c, "out"));
    this.stderr.on("data", (c: Buffer) => this.push(c, "err"));
  }

  private push(c: Buffer, which: "out" | "err"): void {
    const len = which === "out" ? this.outLen : this.errLen;
    const room = this.capBytes - len;
    if (room <= 0) {
      this.truncated = true;
      return;
    }
    const piece = c.length > room ? c.subarray(0, room) : c;
    if (piece.length < c.length) this.truncated = true;
    if (which === "out") {
      this.out.push(piece);
      this.outLen += piece.length;
    } else {
      this.err.push(piece);
      this.errLen += piece.length;
    }
  }

  text(): { stdout: string; stderr: string } {
    return { stdout: Buffer.concat(this.out).toString("utf8"), stderr: Buffer.concat(this.err).toString("utf8") };
  }
}
