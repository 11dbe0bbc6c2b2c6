/**
 * The in-process LLM proxy: one Node `http` server, many rollout sessions.
 *
 * Each session has its own base URL (`<origin>/s/<session_id>`) and secret,
 * accepted as `Authorization: Bearer <secret>` (OpenAI, ANTHROPIC_AUTH_TOKEN)
 * or `x-api-key: <secret>` (ANTHROPIC_API_KEY). The server listens on
 * loopback or a Unix socket. A failure in one request (bad input, engine
 * error, disconnect) is answered in that API's error shape and touches no
 * other session.
 */
import { randomBytes, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { EngineUnavailableError, type EngineClient } from "../engine/index.ts";
import { parseMessagesRequest, streamMessage, writeMessage } from "./anthropic-messages.ts";
import { SessionCapture, type SessionRecords, type TurnListener } from "./capture/session-capture.ts";
import type { ChatRequest } from "./chat.ts";
import { AuthenticationError, ClientGoneError, NotFoundError, ProxyEngineUnavailableError, RequestTooLargeError, asProxyError, errorBody, type ApiFlavor } from "./errors.ts";
import type { ProxyModel } from "./model.ts";
import { parseChatCompletions, streamChatCompletion, writeChatCompletion } from "./openai-chat.ts";
import type { GrowingBodyParser } from "./growing-body.ts";
import { parseResponsesRequest, streamResponse, writeResponse } from "./openai-responses.ts";
import { parseBody, readBody } from "./request-body.ts";
import { SseWriter } from "./sse.ts";
import { runTurn, type ReplyEvent, type RunnerConfig } from "./turn-runner.ts";

export interface ProxyServerConfig {
  model: ProxyModel;
  engine: EngineClient;
  /** Model names clients may ask for; "*" accepts any. */
  servedModels: string[];
  /** Largest request body accepted (default 32 MiB); larger gets 413. */
  maxBodyBytes?: number;
  /** Completion length when the request sets none, and its upper bound (default 8192). */
  maxTokens?: number;
  /**
   * Prompt + completion tokens the engine takes. Default: what the engine reports
   * (`EngineClient.contextWindow`), else the model's tokenizer_config `model_max_length`.
   * A longer prompt gets a 400 in the API's own shape (Anthropic "prompt is too long").
   */
  contextWindow?: number;
  /** Told when each request's response ends: wall time inside the proxy, engine time included, and two of its phases. */
  onRequestEnd?: (e: RequestEnd) => void;
  /** Told about every turn as it ends, in every session. */
  onTurn?: TurnListener;
  /** Unix epoch milliseconds; injectable so tests can assert exact bytes. */
  now?: () => number;
}

export interface RequestEnd {
  session_id: string | null;
  path: string;
  status: number;
  /** When the handler had the request's headers, in Unix epoch ms with sub-ms precision (performance.timeOrigin + now): a span's start. */
  started_at_ms: number;
  /**
   * From the request's headers to its response's last byte handed to the socket ('finish'), or,
   * when the client went away first, to the connection's close.
   */
  duration_ms: number;
  /** From the request's headers to its body's last byte (0 when it had none). */
  body_ms: number;
  /** Parsing, checking and planning the prompt: template, tokenizer, capture (0 when it did not get that far). */
  plan_ms: number;
}

export type ListenOn = { host?: string; port?: number } | { socketPath: string };

export interface ProxySession {
  id: string;
  secret: string;
  /** Base URL for Anthropic clients (ANTHROPIC_BASE_URL); OpenAI clients append `/v1`. */
  baseUrl: string;
  capture: SessionCapture;
}

interface LiveSession extends ProxySession {
  requests: number;
  /** Per route: the previous body, so the history it repeats is not parsed again. */
  bodies: Map<string, GrowingBodyParser>;
}

const SESSION_PATH = /^\/s\/([A-Za-z0-9_.-]+)(\/.*)?$/;
/** Bodies larger than this are parsed and planned in two steps of the event loop. */
const YIELD_AFTER_BODY_BYTES = 1 << 20;

export class ProxyServer {
  private readonly sessions = new Map<string, LiveSession>();
  private readonly runner: RunnerConfig;
  private readonly now: () => number;
  private readonly maxBodyBytes: number;
  private origin = "";
  private seq = 0;
  /** The context window, asked of the engine once (again after a failed ask). */
  private window: Promise<number | null> | null = null;

  private constructor(
    private readonly config: ProxyServerConfig,
    private readonly server: Server,
  ) {
    this.runner = { engine: config.engine, codec: config.model.codec, toolCallFormat: config.model.toolCallFormat, maxTokens: config.maxTokens ?? 8192 };
    this.now = config.now ?? Date.now;
    this.maxBodyBytes = config.maxBodyBytes ?? 32 * 1024 * 1024;
  }

  static async start(config: ProxyServerConfig, listen: ListenOn = {}): Promise<ProxyServer> {
    const server = createServer();
    const proxy = new ProxyServer(config, server);
    server.on("request", (req, res) => void proxy.handle(req, res));
    server.keepAliveTimeout = 60_000;
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      if ("socketPath" in listen) server.listen(listen.socketPath, resolve);
      else server.listen(listen.port ?? 0, listen.host ?? "127.0.0.1", resolve);
    });
    const addr = server.address();
    proxy.origin = typeof addr === "string" ? "http://localhost" : `http://${(addr as AddressInfo).address}:${(addr as AddressInfo).port}`;
    return proxy;
  }

  get url(): string {
    return this.origin;
  }

  createSession(id = `sess-${this.seq++}-${randomBytes(4).toString("hex")}`): ProxySession {
    if (!/^[A-Za-z0-9_.-]+$/.test(id) || this.sessions.has(id)) throw new RangeError(`session id ${JSON.stringify(id)} is invalid or in use`);
    const session: LiveSession = {
      id,
      secret: randomBytes(24).toString("base64url"),
      baseUrl: `${this.origin}/s/${id}`,
      capture: new SessionCapture(id, this.config.model.codec, this.config.onTurn ?? null),
      requests: 0,
      bodies: new Map(),
    };
    this.sessions.set(id, session);
    return session;
  }

  /** Ends a session: its URL stops answering and its records are returned. */
  closeSession(id: string): SessionRecords {
    const s = this.sessions.get(id);
    if (!s) throw new RangeError(`unknown session ${id}`);
    this.sessions.delete(id);
    return s.capture.close();
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://proxy");
    const m = SESSION_PATH.exec(url.pathname);
    const path = m ? (m[2] ?? "/") : url.pathname;
    const onEnd = this.config.onRequestEnd;
    const phases = { body_ms: 0, plan_ms: 0 };
    if (onEnd) {
      const t0 = performance.now();
      // 'close' is the one event every response gets, but a kept-alive one gets it only after its
      // write completes, a loop turn later (~0.2 ms at p50 in the paced bench, more when busy).
      let finished: number | null = null;
      res.once("finish", () => (finished = performance.now()));
      res.once("close", () =>
        onEnd({ session_id: m?.[1] ?? null, path, status: res.statusCode, started_at_ms: performance.timeOrigin + t0, duration_ms: (finished ?? performance.now()) - t0, ...phases }),
      );
    }
    const flavor: ApiFlavor = path.startsWith("/v1/messages") ? "anthropic" : path === "/v1/responses" ? "responses" : "openai";
    try {
      // Claude Code probes its base URL with `HEAD /` before the first call.
      if ((req.method === "HEAD" || req.method === "GET") && (path === "/" || path === "")) {
        res.writeHead(200, { "content-length": 0 }).end();
        return;
      }
      const session = m ? this.sessions.get(m[1]!) : undefined;
      if (!session) throw new AuthenticationError("unknown session: use the base URL the rollout worker issued");
      if (!authorized(req, session.secret)) throw new AuthenticationError(`invalid secret for session ${session.id}`);
      await this.route(req, res, session, path, flavor, phases);
    } catch (e) {
      this.sendError(req, res, flavor, e);
    }
  }

  private async route(req: IncomingMessage, res: ServerResponse, session: LiveSession, path: string, flavor: ApiFlavor, phases: { body_ms: number; plan_ms: number }): Promise<void> {
    const route = `${req.method} ${path}`;
    if (route === "GET /v1/models") return this.listModels(req, res);
    if (req.method !== "POST" || !["/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses"].includes(path))
      throw new NotFoundError(`no route ${route}`, "route");
    const t0 = performance.now();
    const raw = await readBody(req, this.maxBodyBytes);
    const t1 = performance.now();
    phases.body_ms = t1 - t0;
    const planned = () => (phases.plan_ms = performance.now() - t1);
    const body = parseBody(session.bodies, path, raw);
    const window =
      path === "/v1/messages/count_tokens"
        ? null
        : await this.contextWindow().catch((e: unknown) => {
            throw e instanceof EngineUnavailableError ? new ProxyEngineUnavailableError(e) : e;
          });
    // Decoding and parsing a big body is one long synchronous step, and planning (template,
    // tokenizer) another: let other sessions' events run between the two.
    if (raw.size > YIELD_AFTER_BODY_BYTES) await new Promise<void>((resolve) => setImmediate(resolve));
    const n = session.requests++;
    const signal = abortOnDisconnect(res);
    if (path === "/v1/messages/count_tokens") {
      const chat = this.checkModel(parseMessagesRequest(body, true));
      const { template, tokenizer } = this.config.model.codec;
      const count = tokenizer.encode(template.render(chat.messages, chat.tools, { addGenerationPrompt: true })).length;
      planned();
      return sendJson(res, 200, { input_tokens: count });
    }
    if (path === "/v1/chat/completions") {
      const { req: chat, includeUsage } = parseChatCompletions(body);
      this.checkModel(chat);
      const meta = { id: `chatcmpl-${session.id}-${n}`, created: Math.floor(this.now() / 1000), model: chat.model };
      const events = runTurn(this.runner, session.capture, chat, "call_", signal, window);
      planned();
      if (!chat.stream) return writeChatCompletion(events, res, meta);
      return this.stream(res, flavor, events, (ev, sse) => streamChatCompletion(ev, sse, meta, includeUsage));
    }
    if (path === "/v1/messages") {
      const chat = this.checkModel(parseMessagesRequest(body));
      const meta = { id: `msg_${session.id}_${n}`, model: chat.model };
      const events = runTurn(this.runner, session.capture, chat, "toolu_", signal, window);
      planned();
      if (!chat.stream) return writeMessage(events, res, meta);
      return this.stream(res, flavor, events, (ev, sse, first) => streamMessage(ev, sse, meta, first.promptTokens));
    }
    const chat = this.checkModel(parseResponsesRequest(body));
    const meta = { id: `resp_${session.id}_${n}`, created: Math.floor(this.now() / 1000), model: chat.model };
    const events = runTurn(this.runner, session.capture, chat, "call_", signal, window);
    planned();
    if (!chat.stream) return writeResponse(events, res, meta);
    return this.stream(res, flavor, events, (ev, sse) => streamResponse(ev, sse, meta));
  }

  /**
   * Streams a reply. The first event is awaited before any byte is written, so
   * failures before generation starts get a proper HTTP status; later ones go
   * out as an in-stream error event.
   */
  private async stream(
    res: ServerResponse,
    flavor: ApiFlavor,
    events: AsyncGenerator<ReplyEvent>,
    write: (events: AsyncIterable<ReplyEvent>, sse: SseWriter, first: { promptTokens: number }) => Promise<void>,
  ): Promise<void> {
    const first = await events.next();
    const sse = new SseWriter(res);
    const replay: AsyncIterable<ReplyEvent> = {
      async *[Symbol.asyncIterator]() {
        if (!first.done) yield first.value;
        yield* events;
      },
    };
    try {
      await write(replay, sse, { promptTokens: promptTokensOf(first.value) });
    } catch (e) {
      if (!(e instanceof ClientGoneError)) {
        const err = asProxyError(e);
        if (flavor === "anthropic") sse.sendJson(errorBody(flavor, err), "error");
        else sse.sendJson(errorBody(flavor, err));
      }
    } finally {
      sse.close();
    }
  }

  private contextWindow(): Promise<number | null> {
    if (!this.window) {
      const { contextWindow } = this.config;
      const engine = this.config.engine;
      const fallback = this.config.model.contextWindow;
      this.window =
        contextWindow !== undefined ? Promise.resolve(contextWindow) : (engine.contextWindow?.() ?? Promise.resolve(null)).then((w) => w ?? fallback);
      this.window.catch(() => (this.window = null));
    }
    return this.window;
  }

  private checkModel<T extends ChatRequest>(chat: T): T {
    const served = this.config.servedModels;
    if (!served.includes("*") && !served.includes(chat.model))
      throw new NotFoundError(`model ${JSON.stringify(chat.model)} is not served here; served: ${served.join(", ")}`, "model");
    return chat;
  }

  private listModels(req: IncomingMessage, res: ServerResponse): void {
    const ids = this.config.servedModels.filter((m) => m !== "*");
    if (req.headers["anthropic-version"] !== undefined)
      return sendJson(res, 200, {
        data: ids.map((id) => ({ type: "model", id, display_name: id, created_at: "1970-01-01T00:00:00Z" })),
        has_more: false,
        first_id: ids[0] ?? null,
        last_id: ids[ids.length - 1] ?? null,
      });
    sendJson(res, 200, { object: "list", data: ids.map((id) => ({ id, object: "model", created: 0, owned_by: "lego-rl" })) });
  }

  private sendError(req: IncomingMessage, res: ServerResponse, flavor: ApiFlavor, e: unknown): void {
    if (e instanceof ClientGoneError || res.destroyed) return;
    const err = asProxyError(e);
    if (res.headersSent) {
      res.end();
      return;
    }
    const text = JSON.stringify(errorBody(flavor, err));
    const headers: Record<string, string | number> = { "content-type": "application/json", "content-length": Buffer.byteLength(text) };
    // The rest of an oversized body is not read; close the connection instead of draining it.
    if (err instanceof RequestTooLargeError) headers["connection"] = "close";
    res.writeHead(err.status, headers);
    res.end(text);
    if (err instanceof RequestTooLargeError) res.once("finish", () => req.destroy());
  }
}

function promptTokensOf(e: ReplyEvent | void): number {
  if (!e) return 0;
  return e.kind === "start" ? e.prompt_tokens : e.kind === "done" ? e.usage.prompt_tokens : 0;
}

function authorized(req: IncomingMessage, secret: string): boolean {
  const auth = req.headers["authorization"];
  const key = req.headers["x-api-key"];
  const given = typeof key === "string" ? key : typeof auth === "string" && auth.startsWith("Bearer ") ? auth.slice(7) : null;
  if (given === null) return false;
  const a = Buffer.from(given);
  const b = Buffer.from(secret);
  return a.length === b.length && timingSafeEqual(a, b);
}

function abortOnDisconnect(res: ServerResponse): AbortSignal {
  const ac = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) ac.abort();
  });
  return ac.signal;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}
