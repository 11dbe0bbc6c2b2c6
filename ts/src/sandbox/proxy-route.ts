/**
 * The agent's only way out: a relay from a Unix socket in the container's
 * slot folder (mounted read-only at /run/lego-proxy) to the proxy session's
 * own Unix socket. Inside, forwarder.py turns it into http://127.0.0.1:PORT.
 * Relaying on the host keeps one mount per container, bound to a session
 * only when a rollout takes the container (warm pool), and each container can
 * reach its own session and no other.
 */
import { chmodSync, rmSync } from "node:fs";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";

/** Port the forwarder listens on inside the container's loopback. */
export const FORWARDER_PORT = 18080;
export const ROUTE_SOCKET = "proxy.sock";

export class ProxyRoute {
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();

  constructor(readonly slotProxyDir: string) {}

  get hostSocketPath(): string {
    return join(this.slotProxyDir, ROUTE_SOCKET);
  }

  /** Starts relaying this container's socket to `sessionSocket` (the proxy session's Unix socket). */
  async attach(sessionSocket: string): Promise<void> {
    if (this.server) throw new Error(`proxy route ${this.slotProxyDir} is already attached`);
    const server = createServer((inbound) => {
      const upstream = createConnection(sessionSocket);
      this.sockets.add(inbound).add(upstream);
      const drop = (s: Socket) => () => this.sockets.delete(s);
      inbound.on("close", drop(inbound));
      upstream.on("close", drop(upstream));
      inbound.on("error", () => upstream.destroy());
      upstream.on("error", () => inbound.destroy());
      inbound.pipe(upstream).pipe(inbound);
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(this.hostSocketPath, resolve);
    });
    // The agent runs as uid 1000; connect(2) on a Unix socket needs write permission on it.
    chmodSync(this.hostSocketPath, 0o666);
    this.server = server;
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(this.hostSocketPath, { force: true });
  }
}
