/**
 * The engine process every path calls (direct, nginx, LiteLLM and the proxy alike):
 * `decodeMs` per sampled token is waited before answering (the paced workload).
 * OpenAI chat JSON (/v1/chat/completions) or Anthropic Messages JSON (/v1/messages)
 * for the token-free paths, vLLM /v1/completions SSE with ids for the proxy. For the latter it keeps how long it held each request (headers in to
 * last byte out, by request_id) and serves them at GET /held, so the proxy can
 * count its own engine-client hop: its wait on the engine minus the engine's time.
 */
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { loadProxyModel } from "../model.ts";
import { QWEN3_DIR } from "../test-support.ts";
import { REPLY_ARGS, REPLY_TEXT } from "./args.ts";

export async function engineRole(decodeMs: number): Promise<void> {
  const model = loadProxyModel(QWEN3_DIR);
  const ids = [...model.tokenizer.encode(REPLY_TEXT), model.codec.endOfTurnId];
  const decode = () => (decodeMs > 0 ? new Promise((r) => setTimeout(r, decodeMs * ids.length)) : null);
  let n = 0;
  const held: Record<string, number> = {};
  const readBody = (req: IncomingMessage) =>
    new Promise<string>((resolve) => {
      const parts: Buffer[] = [];
      req.on("data", (d: Buffer) => parts.push(d)).on("end", () => resolve(Buffer.concat(parts).toString()));
    });
  const server = createServer(async (req, res) => {
    const t0 = performance.now();
    if (req.method !== "POST" && req.url === "/held") {
      const text = JSON.stringify(held);
      return void res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) }).end(text);
    }
    if (req.method !== "POST") return void res.writeHead(200, { "content-length": 0 }).end();
    const body = await readBody(req);
    await decode();
    if (req.url === "/v1/completions") {
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (let i = 0; i < ids.length; i += 4) {
        const part = ids.slice(i, i + 4);
        const choice = { index: 0, text: "", logprobs: { tokens: part.map((t) => `token_id:${t}`), token_logprobs: part.map(() => -0.5) }, finish_reason: i + 4 >= ids.length ? "stop" : null };
        res.write(`data: ${JSON.stringify({ id: "c", choices: [choice] })}\n\n`);
      }
      res.end("data: [DONE]\n\n");
      // The proxy's requests are 10^4-10^5 ids; only the id is read, and after the reply so the proxy never waits on it.
      const id = /"request_id":"([^"]+)"/.exec(body)?.[1];
      if (id) held[id] = performance.now() - t0;
      return;
    }
    if (req.url === "/v1/messages") {
      const text = JSON.stringify({
        id: `msg_${n}`,
        type: "message",
        role: "assistant",
        model: "bench",
        content: [{ type: "tool_use", id: `toolu_${n++}`, name: "run", input: REPLY_ARGS }],
        stop_reason: "tool_use",
        stop_sequence: null,
        usage: { input_tokens: 0, output_tokens: ids.length },
      });
      return void res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) }).end(text);
    }
    const text = JSON.stringify({
      id: `chatcmpl-${n}`,
      object: "chat.completion",
      created: 0,
      model: "bench",
      choices: [{ index: 0, message: { role: "assistant", content: null, tool_calls: [{ id: `call_${n++}`, type: "function", function: { name: "run", arguments: JSON.stringify(REPLY_ARGS) } }] }, finish_reason: "tool_calls" }],
      usage: { prompt_tokens: 0, completion_tokens: ids.length, total_tokens: ids.length },
    });
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) }).end(text);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  console.log(JSON.stringify({ port: (server.address() as AddressInfo).port }));
}

