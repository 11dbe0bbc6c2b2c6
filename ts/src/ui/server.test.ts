/** The Live UI server over HTTP: who it refuses, what a bad run folder gives, what the API serves. */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildUiAssets, UiServer } from "./index.ts";
import { RunFolder } from "./test-support.ts";

let root: string;
let assets: string;
const servers: UiServer[] = [];

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "ui-server-"));
  assets = await buildUiAssets(join(root, "assets"));
}, 120_000);
afterAll(async () => {
  for (const s of servers) await s.close();
  rmSync(root, { recursive: true, force: true });
});

async function serve(runDir: string): Promise<{ url: URL; server: UiServer }> {
  const server = new UiServer({ runDir, host: "127.0.0.1", port: 0, assetsDir: assets, pollMs: 50 });
  servers.push(server);
  return { url: new URL(await server.listen()), server };
}

/** A raw request, so Host and Origin can be what an attacker's page would send. */
function get(url: URL, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string; headers: Record<string, unknown> }> {
  return new Promise((ok, fail) => {
    const req = request({ host: url.hostname, port: url.port, path, headers, timeout: 10_000 }, (res) => {
      let body = "";
      res.on("data", (d) => { body += d; });
      res.on("end", () => ok({ status: res.statusCode!, body, headers: res.headers }));
    });
    req.on("timeout", () => req.destroy(new Error(`GET ${path} timed out`)));
    req.on("error", fail);
    req.end();
  });
}

describe("lego ui server", () => {
  it("serves the page and the run to the token holder, and sets the token cookie", async () => {
    const run = new RunFolder(join(root, "run-ok"));
    run.step(1);
    run.batch(0);
    const { url, server } = await serve(run.dir);
    const page = await get(url, `/?token=${server.token}`);
    expect(page.status).toBe(200);
    expect(page.body).toContain('<div id="app">');
    expect(String(page.headers["set-cookie"])).toContain(`lego_ui_token=${server.token}`);
    const api = await get(url, "/api/run", { cookie: `lego_ui_token=${server.token}` });
    expect(api.status).toBe(200);
    const snap = JSON.parse(api.body);
    expect(snap.status).toMatchObject({ steps: 1, batches: 1, trajectories: 4 });
    const id = snap.trajectories[0].id;
    const t = JSON.parse((await get(url, `/api/trajectory?id=${id}&token=${server.token}`)).body);
    expect(t.segments[0].turns).toHaveLength(4);
    expect((await get(url, `/api/trajectory?id=nope&token=${server.token}`)).status).toBe(404);
  });

  it("refuses a request without the token, from another origin, or for another host", async () => {
    const run = new RunFolder(join(root, "run-refuse"));
    const { url, server } = await serve(run.dir);
    const noToken = await get(url, "/api/run");
    expect(noToken.status).toBe(401);
    expect(noToken.body).toContain("access token");
    expect((await get(url, "/api/run?token=wrong")).status).toBe(401);
    const otherOrigin = await get(url, `/api/run?token=${server.token}`, { origin: "http://evil.example" });
    expect(otherOrigin.status).toBe(403);
    expect(otherOrigin.body).toContain("http://evil.example");
    const rebound = await get(url, `/api/run?token=${server.token}`, { host: `evil.example:${url.port}` });
    expect(rebound.status).toBe(403);
    expect((await get(url, `/api/run?token=${server.token}`, { origin: `http://127.0.0.1:${url.port}` })).status).toBe(200);
  });

  it("answers a missing run folder with a 404 page that names it and the fix", async () => {
    const missing = join(root, "no-such-run");
    const { url, server } = await serve(missing);
    const page = await get(url, `/?token=${server.token}`);
    expect(page.status).toBe(404);
    expect(page.body).toContain("Run folder not found");
    expect(page.body).toContain(missing);
    expect(page.body).toContain("--run-dir");
  });

  it("answers a corrupt step log or spool file with a 500 page naming the file, and the API with the error", async () => {
    const run = new RunFolder(join(root, "run-corrupt"));
    run.step(1);
    writeFileSync(join(run.dir, "steps.jsonl"), "{not json\n", { flag: "a" });
    const { url, server } = await serve(run.dir);
    const page = await get(url, `/?token=${server.token}`);
    expect(page.status).toBe(500);
    expect(page.body).toContain("Cannot read this run");
    expect(page.body).toContain("steps.jsonl");
    expect(page.body).toContain("line 2");
    const run2 = new RunFolder(join(root, "run-corrupt-spool"));
    writeFileSync(join(run2.dir, "spool", "00000000000000000-bad.lgrb"), "garbage");
    const second = await serve(run2.dir);
    const api = await get(second.url, `/api/run?token=${second.server.token}`);
    expect(api.status).toBe(500);
    expect(JSON.parse(api.body).error).toMatch(/bad\.lgrb.*LGRB magic/);
  });
});
