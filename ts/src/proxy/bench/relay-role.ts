/**
 * The bench's two Node.js relays, each in its own process between the driver and the engine's
 * HTTP endpoint, doing nothing but forwarding (no parsing of the body, templating, tokenizing or
 * records), with the proxy's V8 flags:
 *   node_tcp_relay   pipes each client connection's bytes to its own engine connection and back:
 *                    one process hop each way, what the host charges for putting any process
 *                    in the path (nginx's floor, measured by a Node.js process);
 *   node_http_relay  node:http in and out (a server, and a kept-alive client as nginx's upstream
 *                    `keepalive`): what Node's HTTP layer adds on top of that hop.
 * Paired per request with the proxy's paths, they separate what the host and the runtime charge
 * from the proxy's own work (main.ts `paired_over_tcp_relay`).
 */
import { Agent, createServer as createHttpServer, request } from "node:http";
import { connect, createServer as createTcpServer, type AddressInfo, type Server } from "node:net";

export type RelayKind = "tcp" | "http";

export const RELAY_PATHS: Record<string, RelayKind> = { node_tcp_relay: "tcp", node_http_relay: "http" };

/** Starts a relay of `kind` to the engine at 127.0.0.1:`enginePort`; resolves once it listens. */
export async function startRelay(kind: RelayKind, enginePort: number): Promise<{ url: string; server: Server }> {
  const server = kind === "tcp" ? tcpRelay(enginePort) : httpRelay(enginePort);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

function tcpRelay(enginePort: number): Server {
  return createTcpServer({ noDelay: true }, (client) => {
    const engine = connect({ port: enginePort, host: "127.0.0.1", noDelay: true });
    client.pipe(engine).pipe(client);
    // Either side going away takes the other with it, as a proxy's connection pair would.
    client.on("error", () => engine.destroy()).on("close", () => engine.destroy());
    engine.on("error", () => client.destroy()).on("close", () => client.destroy());
  });
}

function httpRelay(enginePort: number): Server {
  const agent = new Agent({ keepAlive: true, maxSockets: 128 });
  const server = createHttpServer((req, res) => {
    // Hop-by-hop headers stay on this hop: a client's `Connection: close` must not close the kept-alive engine connection.
    const { connection: _connection, "keep-alive": _keepAlive, ...headers } = req.headers;
    const upstream = request({ host: "127.0.0.1", port: enginePort, method: req.method, path: req.url, headers, agent }, (reply) => {
      res.writeHead(reply.statusCode ?? 502, reply.headers);
      reply.pipe(res);
    });
    upstream.on("error", (e) => {
      if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" });
      res.end(`relay: the engine call failed: ${e.message}`);
    });
    req.pipe(upstream);
  });
  server.keepAliveTimeout = 60_000;
  return server;
}

/** The relay's child-process role: reports `{"url": ...}` as its first line, then serves until killed. */
export async function relayRole(kind: RelayKind, enginePort: number): Promise<void> {
  const kinds = Object.values(RELAY_PATHS);
  if (!kinds.includes(kind)) throw new Error(`unknown relay kind ${String(kind)} (${kinds.join(" or ")})`);
  const { url } = await startRelay(kind, enginePort);
  console.log(JSON.stringify({ url }));
}
