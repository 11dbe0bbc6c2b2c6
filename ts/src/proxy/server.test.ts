import { request } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import type { ProxyServer, RequestEnd } from "./server.ts";
import { MODEL_NAME, qwen3, scriptedEngine, startProxy } from "./test-support.ts";

let proxy: ProxyServer | null = null;
let dir: string | null = null;
afterEach(async () => {
  await proxy?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  proxy = null;
  dir = null;
});

/** One HTTP exchange over a Unix socket. */
function overSocket(socketPath: string, method: string, path: string, headers: Record<string, string>, body?: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, method, path, headers }, (res) => {
      let text = "";
      res.on("data", (d) => (text += d)).on("end", () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.once("error", reject);
    req.end(body);
  });
}

describe("proxy server", () => {
  it("takes a completion of 150k tokens that arrives as one chunk (a whole completion) and records every token", async () => {
    const hello = qwen3().tokenizer.encode("hello")[0]!;
    const n = 150_000;
    proxy = await startProxy(scriptedEngine(qwen3(), [{ token_ids: new Array<number>(n).fill(hello), finish: "length" }], { chunkSize: n }), { maxTokens: n, contextWindow: 2 * n });
    const s = proxy.createSession("big");
    const res = await fetch(`${s.baseUrl}/v1/messages`, { method: "POST", headers: { "x-api-key": s.secret }, body: JSON.stringify({ model: MODEL_NAME, max_tokens: n, messages: [{ role: "user", content: "hi" }] }) });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { usage: { output_tokens: number }; stop_reason: string };
    expect(body.usage.output_tokens).toBe(n);
    expect(body.stop_reason).toBe("max_tokens");
    const records = proxy.closeSession("big");
    expect(records.turns[0]!.completion_ids.length).toBe(n);
    expect(records.turns[0]!.logprobs.length).toBe(n);
  });

  it("serves a session over a Unix socket", async () => {
    dir = mkdtempSync(join(tmpdir(), "lego-proxy-"));
    const socketPath = join(dir, "proxy.sock");
    proxy = await startProxy(scriptedEngine(qwen3(), [{ text: "over the socket" }]), {}, { socketPath });
    const s = proxy.createSession("u");
    expect(s.baseUrl).toBe("http://localhost/s/u");
    const r = await overSocket(socketPath, "POST", "/s/u/v1/messages", { "x-api-key": s.secret }, JSON.stringify({ model: MODEL_NAME, max_tokens: 20, messages: [{ role: "user", content: "hi" }] }));
    expect(r.status).toBe(200);
    expect(JSON.parse(r.text)).toMatchObject({ content: [{ type: "text", text: "over the socket" }] });
  });

  it("answers Claude Code's HEAD probe without credentials, and lists models in the Anthropic shape when asked", async () => {
    proxy = await startProxy(scriptedEngine(qwen3(), []));
    const s = proxy.createSession("h");
    expect((await fetch(s.baseUrl, { method: "HEAD" })).status).toBe(200);
    expect((await fetch(`${proxy.url}/`, { method: "HEAD" })).status).toBe(200);
    const models = await fetch(`${s.baseUrl}/v1/models`, { headers: { "x-api-key": s.secret, "anthropic-version": "2023-06-01" } });
    expect(await models.json()).toEqual({ data: [{ type: "model", id: MODEL_NAME, display_name: MODEL_NAME, created_at: "1970-01-01T00:00:00Z" }], has_more: false, first_id: MODEL_NAME, last_id: MODEL_NAME });
  });

  it("keeps concurrent sessions' records apart and stops serving a closed session", async () => {
    proxy = await startProxy(scriptedEngine(qwen3(), (call) => ({ text: `reply ${call.index}` })));
    const [a, b] = [proxy.createSession("a"), proxy.createSession("b")];
    const ask = (s: typeof a, content: string) =>
      fetch(`${s.baseUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${s.secret}` }, body: JSON.stringify({ model: MODEL_NAME, messages: [{ role: "user", content }] }) });
    const [ra, rb] = await Promise.all([ask(a, "from a"), ask(b, "from b")]);
    expect([ra.status, rb.status]).toEqual([200, 200]);
    const recA = proxy.closeSession("a");
    expect(recA.turns.map((t) => qwen3().tokenizer.decode(t.prompt_ids))).toEqual(["<|im_start|>user\nfrom a<|im_end|>\n<|im_start|>assistant\n"]);
    expect((await ask(a, "again")).status).toBe(401);
    expect((await ask(b, "again")).status).toBe(200);
    expect(proxy.closeSession("b").turns).toHaveLength(2);
  });

  it("puts a body that arrives in many pieces together, for two sessions at once", async () => {
    proxy = await startProxy(scriptedEngine(qwen3(), (call) => ({ text: `reply ${call.index}` })));
    const [a, b] = [proxy.createSession("big-a"), proxy.createSession("big-b")];
    // A few hundred KB each, written in small pieces with pauses, interleaved between the two sessions.
    const content = (tag: string) => `${tag} ` + "lorem ipsum dolor ".repeat(20_000);
    const send = (s: typeof a, tag: string) =>
      new Promise<{ status: number; text: string }>((resolve, reject) => {
        const body = Buffer.from(JSON.stringify({ model: MODEL_NAME, messages: [{ role: "user", content: content(tag) }] }));
        const url = new URL(`${s.baseUrl}/v1/chat/completions`);
        const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: "POST", headers: { authorization: `Bearer ${s.secret}`, "content-length": body.length } }, (res) => {
          let text = "";
          res.on("data", (d) => (text += d)).on("end", () => resolve({ status: res.statusCode ?? 0, text }));
        });
        req.once("error", reject);
        let at = 0;
        const next = () => {
          if (at >= body.length) return void req.end();
          req.write(body.subarray(at, (at += 7_000)));
          setTimeout(next, 1);
        };
        next();
      });
    const [ra, rb] = await Promise.all([send(a, "first"), send(b, "second")]);
    expect([ra.status, rb.status]).toEqual([200, 200]);
    const decoded = (id: string) => qwen3().tokenizer.decode(proxy!.closeSession(id).turns[0]!.prompt_ids);
    expect(decoded("big-a")).toBe(`<|im_start|>user\n${content("first")}<|im_end|>\n<|im_start|>assistant\n`);
    expect(decoded("big-b")).toBe(`<|im_start|>user\n${content("second")}<|im_end|>\n<|im_start|>assistant\n`);
  });

  it("tells how long each request spent reading its body and planning its prompt", async () => {
    const ended: RequestEnd[] = [];
    const before = Date.now();
    proxy = await startProxy(scriptedEngine(qwen3(), [{ text: "timed" }]), { onRequestEnd: (e) => ended.push(e) });
    const s = proxy.createSession("t");
    const call = (secret: string) =>
      fetch(`${s.baseUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${secret}` }, body: JSON.stringify({ model: MODEL_NAME, messages: [{ role: "user", content: "time me" }] }) });
    expect((await call(s.secret)).status).toBe(200);
    expect((await call("wrong")).status).toBe(401);
    await new Promise((r) => setImmediate(r));
    const [ok, refused] = ended;
    expect(ok).toMatchObject({ session_id: "t", path: "/v1/chat/completions", status: 200 });
    expect(ok!.plan_ms).toBeGreaterThan(0);
    expect(ok!.body_ms).toBeGreaterThanOrEqual(0);
    expect(ok!.duration_ms).toBeGreaterThanOrEqual(ok!.body_ms + ok!.plan_ms);
    // A span: it starts on the wall clock after the test began, and the second request's after the first one's end.
    expect(ok!.started_at_ms).toBeGreaterThanOrEqual(before - 1);
    expect(refused!.started_at_ms).toBeGreaterThanOrEqual(ok!.started_at_ms + ok!.duration_ms);
    expect(refused!.started_at_ms + refused!.duration_ms).toBeLessThanOrEqual(Date.now() + 1);
    expect(refused).toMatchObject({ status: 401, body_ms: 0, plan_ms: 0 });
  });
});
