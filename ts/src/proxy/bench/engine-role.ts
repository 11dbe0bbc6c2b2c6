/**
 * The engine process every path calls (direct, nginx, LiteLLM and the proxy alike):
 * `decodeMs` per sampled token is waited before answering (the paced workload).
 * OpenAI chat JSON (/v1/chat/completions) or Anthropic Messages JSON (/v1/messages)
 * for the token-free paths, vLLM /v1/completions SSE with ids for the proxy over
 * HTTP, and the Python engine's control protocol (msgpack GenerateRequest in,
 * TokenChunks and a GenerateResult out; ZmqEngine is its client) over ZeroMQ and
 * over a Unix socket for the proxy's other runs, in the same process and with the
 * same reply and decode wait.
 * For the proxy's calls it keeps how long it held each request (HTTP: headers in
 * to last byte out; control protocol: request frame in to result frame sent; by request_id)
 * and serves them at GET /held, so the proxy can count its own engine-client hop:
 * its wait on the engine minus the engine's time. For every request it also keeps when it
 * was seen, read and answered on the shared wall clock (GET /spans returns and clears them;
 * main.ts lays them beside the driver's and the proxy's to show where a path's time goes),
 * keyed by the driver's `x-bench-request` header on the chat paths, by request id on the proxy's.
 */
import { createServer, type IncomingMessage } from "node:http";
import { createServer as createNetServer, type AddressInfo } from "node:net";
import { Router } from "zeromq";
import { FrameReader, frameBytes } from "../../engine/index.ts";
import { decodeControl, encodeControl, SCHEMA_VERSION, type ControlMessage } from "../../schema/index.ts";
import { loadProxyModel } from "../model.ts";
import { QWEN3_DIR } from "../test-support.ts";
import { REPLY_ARGS, REPLY_TEXT } from "./args.ts";
import { wallMs, type EngineSpan } from "./stats.ts";

/** The `"request_id":"..."` field of a JSON body, read from its bytes. */
function requestIdOf(body: Buffer): string | undefined {
  const key = body.indexOf('"request_id":"');
  if (key < 0) return undefined;
  const from = key + '"request_id":"'.length;
  const to = body.indexOf('"', from);
  return to < 0 ? undefined : body.toString("utf8", from, to);
}

/** A reply's timers, armed when it was made, and `out()`, called as its last token leaves (to record how late). */
interface ReplyTimers {
  due: Array<Promise<unknown> | null>;
  out: () => void;
}

/** The engine's EngineSpan per request, as it fills them in. */
type SpanBook = Map<string, EngineSpan>;

/** When a streamed reply's chunks leave the engine: as their tokens are sampled, or all once the last one is. */
export type StreamPacing = "decode" | "end";

/** `socketPath`: where the engine serves its control protocol over a Unix socket. */
export async function engineRole(decodeMs: number, pacing: StreamPacing, socketPath: string): Promise<void> {
  const model = loadProxyModel(QWEN3_DIR);
  const ids = [...model.tokenizer.encode(REPLY_TEXT), model.codec.endOfTurnId];
  // One timer per chunk, all armed once the request is read (its body, or its frame decoded), each for
  // its chunk's decode time: a chunk ending at token `end` after `decodeMs * end` ("decode" pacing), or
  // every chunk with the last token ("end"). So the last token leaves by setTimeout(decodeMs * tokens),
  // armed at the same point, on every path. Until 2026-12-07 a streamed chunk's timer was armed when the
  // one before fired, for the time left, and a JSON reply's for its time less the microseconds since it
  // began: fractional delays, which Node truncates and checks against a whole-millisecond loop clock, so
  // they fired early, by different amounts on the two shapes (p50 ~0.85 ms for a JSON reply, ~0.36 ms for
  // a streamed one): a ~0.5 ms bias against the proxy's streamed paths in every paired figure.
  const chunkEnds = Array.from({ length: Math.ceil(ids.length / 4) }, (_, k) => Math.min(4 * (k + 1), ids.length));
  // No timer when nothing is waited (back_to_back): Node waits at least 1 ms for any.
  const sampled = (tokens: number) => (decodeMs > 0 ? new Promise((r) => setTimeout(r, decodeMs * tokens)) : null);
  // Per reply, how late its last token left: from arming its timers to the last one's continuation,
  // minus decodeMs per token. GET /lateness returns (and clears) them, so the driver can show every
  // path's replies were timed alike.
  let lateness: number[] = [];
  const timers = (arm: () => Array<Promise<unknown> | null>): ReplyTimers => {
    const armed = performance.now();
    return { due: arm(), out: () => void lateness.push(performance.now() - armed - decodeMs * ids.length) };
  };
  const streamTimers = () =>
    timers(() => {
      if (pacing === "decode") return chunkEnds.map(sampled);
      const last = sampled(ids.length);
      return chunkEnds.map(() => last);
    });
  const replyTimer = () => timers(() => [sampled(ids.length)]);
  let n = 0;
  const held: Record<string, number> = {};
  let spans: SpanBook = new Map();
  // The body is read to its end on every path and kept only where a field of it is read (the proxy's
  // request id): the chat paths' bodies are 10^5-10^6 bytes that nothing here looks at.
  const readBody = (req: IncomingMessage, keep: boolean) =>
    new Promise<Buffer[]>((resolve) => {
      const parts: Buffer[] = [];
      req.on("data", (d: Buffer) => void (keep && parts.push(d))).on("end", () => resolve(parts));
    });
  const server = createServer(async (req, res) => {
    const t0 = performance.now();
    const seen = wallMs();
    if (req.method !== "POST" && req.url === "/held") {
      const text = JSON.stringify(held);
      return void res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) }).end(text);
    }
    if (req.method !== "POST" && req.url === "/spans") {
      const text = JSON.stringify(Object.fromEntries(spans));
      spans = new Map();
      return void res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) }).end(text);
    }
    if (req.method !== "POST" && req.url === "/lateness") {
      const text = JSON.stringify(lateness);
      lateness = [];
      return void res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text) }).end(text);
    }
    if (req.method !== "POST") return void res.writeHead(200, { "content-length": 0 }).end();
    const body = await readBody(req, req.url === "/v1/completions");
    const read = wallMs();
    if (req.url === "/v1/completions") {
      const reply = streamTimers();
      // The proxy's requests are 10^4-10^5 ids; only the id is read, while the reply's tokens are sampled, and the body dropped.
      const id = requestIdOf(Buffer.concat(body.splice(0)));
      const span: EngineSpan = { in: seen, read, out: NaN };
      if (id) spans.set(id, span);
      // Headers first, as vLLM's stream opens before the first token.
      res.writeHead(200, { "content-type": "text/event-stream" });
      for (let i = 0; i < ids.length; i += 4) {
        await reply.due[i / 4];
        if (i + 4 >= ids.length) {
          reply.out();
          span.out = wallMs();
        }
        const part = ids.slice(i, i + 4);
        const choice = { index: 0, text: "", logprobs: { tokens: part.map((t) => `token_id:${t}`), token_logprobs: part.map(() => -0.5) }, finish_reason: i + 4 >= ids.length ? "stop" : null };
        res.write(`data: ${JSON.stringify({ id: "c", choices: [choice] })}\n\n`);
      }
      res.end("data: [DONE]\n\n");
      if (id) held[id] = performance.now() - t0;
      return;
    }
    // A JSON reply (direct, nginx, LiteLLM) leaves when the last token is sampled, by the same kind of timer as a streamed one's last chunk.
    const reply = replyTimer();
    const key = req.headers["x-bench-request"];
    const span: EngineSpan = { in: seen, read, out: NaN };
    if (typeof key === "string") spans.set(key, span);
    await reply.due[0];
    reply.out();
    span.out = wallMs();
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
  const { zmq, unix } = await controlEngine(ids, model.tokenizer.size, streamTimers, replyTimer, held, () => spans, socketPath);
  console.log(JSON.stringify({ port: (server.address() as AddressInfo).port, zmq, unix }));
}

/**
 * The Python engine's control protocol, served over ZeroMQ (a ROUTER) and over a Unix
 * stream socket (length-prefixed frames, wire.ts): engine_hello gets a dense model's
 * EngineInfo, each generate the reply's ids in TokenChunks of 4 (as the SSE side
 * streams them), then the GenerateResult (when the request sets `final_tokens_in_result`, the
 * last chunk's ids in the result alone: this engine's "step" is a chunk of 4 tokens, the Python
 * engine's one token; schema 2.4); a generate with
 * `stream` false gets the GenerateResult alone, when the last token is sampled. Returns both endpoints (ZeroMQ on tcp
 * loopback, as the HTTP side, so both hops cross the same kind of socket).
 */
async function controlEngine(
  ids: number[],
  vocabSize: number,
  streamTimers: () => ReplyTimers,
  replyTimer: () => ReplyTimers,
  held: Record<string, number>,
  spans: () => SpanBook,
  path: string,
): Promise<{ zmq: string; unix: string }> {
  const reply = Int32Array.from(ids);
  const logprobs = new Float32Array(ids.length).fill(-0.5);
  type Send = (m: ControlMessage) => Promise<void>;
  const serve = async (send: Send, m: ControlMessage & { kind: "generate" }, t0: number, span: EngineSpan) => {
    spans().set(m.request_id, span);
    if (m.stream) {
      const timed = streamTimers();
      for (let i = 0; i < reply.length; i += 4) {
        await timed.due[i / 4];
        if (i + 4 >= reply.length) {
          timed.out();
          span.out = wallMs();
          // As the Python engine (2.4), with a chunk as this engine's step: its tokens go in the result alone when the client asks.
          if (m.final_tokens_in_result === true) break;
        }
        void send({ kind: "token_chunk", request_id: m.request_id, token_ids: reply.subarray(i, i + 4), logprobs: logprobs.subarray(i, i + 4), policy_version: 0 });
      }
    } else {
      // Asked for the completion whole (the client did not stream): one timer, as a JSON reply's.
      const timed = replyTimer();
      await timed.due[0];
      timed.out();
      span.out = wallMs();
    }
    await send({
      kind: "generate_result", request_id: m.request_id, finish_reason: "stop", completion_token_ids: reply, logprobs,
      prompt_routing: new Uint16Array(0), completion_routing: new Uint16Array(0), moe_layers: 0, top_k: 0, policy_version: 0, seed: 0,
      policy_versions: null, cached_prompt_tokens: null,
    });
    held[m.request_id] = performance.now() - t0;
  };
  const onFrame = (send: Send, frame: Uint8Array) => {
    const t0 = performance.now();
    const seen = wallMs();
    const m = decodeControl(frame);
    if (m.kind === "engine_hello")
      void send({ kind: "engine_info", model: "bench", policy_version: 0, vocab_size: vocabSize, max_context: 1 << 20, moe_layers: 0, top_k: 0, num_experts: 0, active_requests: 0, schema_version: SCHEMA_VERSION });
    else if (m.kind === "generate") void serve(send, m, t0, { in: seen, read: wallMs(), out: NaN });
    // The bench never aborts a request that is still running; one that ended is unknown, as the Python engine says.
    else if (m.kind === "abort") void send({ kind: "error", code: "unknown_request", message: `no request ${m.request_id}`, batch_id: null, request_id: m.request_id, field: null });
  };

  const router = new Router({ linger: 0 });
  await router.bind("tcp://127.0.0.1:*");
  // zeromq.js allows one pending send per socket: replies queue in order.
  let tail: Promise<void> = Promise.resolve();
  void (async () => {
    for await (const [peer, frame] of router) onFrame((m) => (tail = tail.then(() => router.send([peer!, encodeControl(m)]))), frame!);
  })();

  const unix = createNetServer((socket) => {
    const send: Send = (m) => {
      socket.write(Buffer.concat(frameBytes(encodeControl(m))));
      return Promise.resolve();
    };
    const reader = new FrameReader((frame) => onFrame(send, frame));
    socket.on("data", (chunk: Buffer) => reader.push(chunk));
    socket.on("error", () => undefined);
  });
  await new Promise<void>((r) => unix.listen(path, r));
  return { zmq: router.lastEndpoint!, unix: `unix://${path}` };
}
