import { Agent, createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { startRelay, type RelayKind } from "./relay-role.ts";

const closing: Server[] = [];
afterEach(async () => {
  for (const s of closing.splice(0)) await new Promise((r) => s.close(r)).catch(() => undefined);
});

/** An engine stand-in that answers each POST with what it got: the body's length, its last bytes and the bench's request header. */
async function echoEngine(connections = { count: 0 }): Promise<number> {
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (d: Buffer) => parts.push(d)).on("end", () => {
      const body = Buffer.concat(parts);
      const text = JSON.stringify({ bytes: body.length, tail: body.subarray(-8).toString(), key: req.headers["x-bench-request"] ?? null });
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) }).end(text);
    });
  });
  server.keepAliveTimeout = 60_000;
  server.on("connection", () => (connections.count += 1));
  closing.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return (server.address() as AddressInfo).port;
}

/** POSTs `body` over `agent` (one kept-alive connection) and returns the status and the parsed JSON reply. */
function post(url: string, agent: Agent, body: string, key: string): Promise<{ status: number; json: unknown }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}/v1/chat/completions`, { method: "POST", agent, headers: { "x-bench-request": key, "content-length": Buffer.byteLength(body) }, timeout: 10_000 }, (res) => {
      const parts: Buffer[] = [];
      res.on("data", (d: Buffer) => parts.push(d)).on("end", () => resolve({ status: res.statusCode!, json: res.statusCode === 200 ? JSON.parse(Buffer.concat(parts).toString()) : null }));
    });
    req.on("timeout", () => req.destroy(new Error("no reply within 10 s"))).on("error", reject);
    req.end(body);
  });
}

describe.each(["tcp", "http"] as RelayKind[])("the bench's %s relay", (kind) => {
  it("forwards agent-sized requests and their replies unchanged, on kept-alive connections", async () => {
    const connections = { count: 0 };
    const relay = await startRelay(kind, await echoEngine(connections));
    closing.push(relay.server as unknown as Server);
    const body = "x".repeat(300_000) + "the-end!";
    const client = new Agent({ keepAlive: true, maxSockets: 1 });
    for (const key of ["7/1", "7/2"]) expect(await post(relay.url, client, body, key)).toEqual({ status: 200, json: { bytes: body.length, tail: "the-end!", key } });
    client.destroy();
    // One client connection, one engine connection: the relay pays no connect per request (nginx's upstream keepalive).
    expect(connections.count).toBe(1);
  });

  it("answers an engine that is gone with an error, not a hang", async () => {
    const port = await echoEngine();
    await new Promise((r) => closing.pop()!.close(r));
    const relay = await startRelay(kind, port);
    closing.push(relay.server as unknown as Server);
    const call = post(relay.url, new Agent(), "{}", "7/1");
    if (kind === "http") expect((await call).status).toBe(502);
    else await expect(call).rejects.toThrow(/socket hang up|ECONNRESET/);
  });
});
