import Docker from "dockerode";
import { AsyncLocalStorage } from "node:async_hooks";
import { PassThrough, type Readable } from "node:stream";

let shared: Docker | undefined;

/** A Docker daemon the sandbox talks to: its name (the endpoint as given) and its client. */
export interface DockerEndpoint {
  name: string;
  docker: Docker;
}

const scope = new AsyncLocalStorage<DockerEndpoint>();

/**
 * The daemon of the current scope (see withDockerEndpoint), else one dockerode
 * client per process (DOCKER_HOST or the default socket). Everything the
 * sandbox does to a daemon goes through here, so a rollout placed on a host
 * creates, builds, execs and removes on that host alone.
 */
export function dockerClient(): Docker {
  const scoped = scope.getStore();
  if (scoped) return scoped.docker;
  shared ??= new Docker();
  return shared;
}

/** The endpoint of the current scope, or undefined for the process's default daemon. */
export function currentDockerEndpoint(): DockerEndpoint | undefined {
  return scope.getStore();
}

/** Runs `fn` (and everything it starts, timers and promises included) against `endpoint`'s daemon. */
export function withDockerEndpoint<T>(endpoint: DockerEndpoint, fn: () => Promise<T>): Promise<T> {
  return scope.run(endpoint, fn);
}

/**
 * A client for a Docker endpoint as dockerode supports it: `unix:///path` (or a
 * bare absolute path), `tcp://HOST:PORT` (plain HTTP; TLS is not configured here)
 * and `ssh://USER@HOST[:PORT]` (dockerode's ssh transport, authenticated by the
 * given ssh-agent socket). Anything else is a clear error.
 */
export function dockerEndpoint(name: string, opts: { sshAgent?: string } = {}): DockerEndpoint {
  if (name.startsWith("/")) return { name, docker: new Docker({ socketPath: name }) };
  let url: URL;
  try {
    url = new URL(name);
  } catch {
    throw new Error(`docker host ${JSON.stringify(name)} is not unix:///PATH, tcp://HOST:PORT or ssh://USER@HOST`);
  }
  if (url.protocol === "unix:") {
    if (!url.pathname || url.pathname === "/") throw new Error(`docker host ${name}: no socket path`);
    return { name, docker: new Docker({ socketPath: url.pathname }) };
  }
  if (url.protocol === "tcp:") {
    if (!url.hostname || !url.port) throw new Error(`docker host ${name}: tcp:// needs HOST:PORT`);
    return { name, docker: new Docker({ host: url.hostname, port: Number(url.port), protocol: "http" }) };
  }
  if (url.protocol === "ssh:") {
    if (!url.hostname) throw new Error(`docker host ${name}: ssh:// needs a host`);
    return {
      name,
      docker: new Docker({
        protocol: "ssh", host: url.hostname, port: url.port ? Number(url.port) : 22, username: url.username || undefined,
        ...(opts.sshAgent ? { sshOptions: { agent: opts.sshAgent } } : {}),
      } as Docker.DockerOptions),
    };
  }
  throw new Error(`docker host ${name}: unsupported scheme ${url.protocol} (unix://, tcp://, ssh://)`);
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
    this.stdout.on("data", (c: Buffer) => this.add(c, "out"));
    this.stderr.on("data", (c: Buffer) => this.add(c, "err"));
  }

  /** Takes a chunk at once (the streams above take theirs as they flow). */
  add(c: Buffer, which: "out" | "err"): void {
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
