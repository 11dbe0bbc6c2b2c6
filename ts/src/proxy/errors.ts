/**
 * Typed errors of the proxy and their wire shapes in each API.
 *
 * OpenAI: `{"error":{"message","type","param","code"}}` (OpenAI API reference, "Error codes").
 * Anthropic: `{"type":"error","error":{"type","message"}}` with types
 * invalid_request_error 400, authentication_error 401, not_found_error 404,
 * request_too_large 413, api_error 500, overloaded_error 529
 * (Anthropic API docs, "Errors"). Responses (`/v1/responses`) uses the OpenAI
 * shape; its streams report a later failure as an `error` event.
 *
 * A request the harness can fix (bad input, a prompt over the context window, a
 * sampling setting the engine refuses) is a 4xx, so the harness stops, trims or
 * compacts as it does against the real API; a 5xx tells it to retry.
 */

export type ApiFlavor = "openai" | "anthropic" | "responses";

export abstract class ProxyError extends Error {
  abstract readonly status: number;
  abstract readonly anthropicType: string;
  abstract readonly openaiType: string;
  readonly openaiCode: string | null = null;
  /** The request field at fault (OpenAI `param`), if any. */
  readonly param: string | null = null;

  /** The message as `flavor` words it (most errors say the same in every API). */
  messageFor(_flavor: ApiFlavor): string {
    return this.message;
  }

  paramFor(_flavor: ApiFlavor): string | null {
    return this.param;
  }
}

export class InvalidRequestError extends ProxyError {
  readonly status = 400;
  readonly anthropicType = "invalid_request_error";
  readonly openaiType = "invalid_request_error";
  override readonly param: string | null;
  constructor(message: string, param: string | null = null) {
    super(message);
    this.name = "InvalidRequestError";
    this.param = param;
  }
}

/**
 * The prompt does not fit the engine's context window (a prompt must leave room
 * for one sampled token). Worded as each API words it, because harnesses match
 * the text: Claude Code compacts on Anthropic's `prompt is too long: N tokens > M
 * maximum`; OpenAI clients read the code `context_length_exceeded`.
 */
export class PromptTooLongError extends InvalidRequestError {
  override readonly openaiCode = "context_length_exceeded";
  /** The most prompt tokens the window takes. */
  readonly maxPromptTokens: number;
  constructor(
    /** The prompt's length; an estimate when `estimated` (a prompt far over the window is not tokenized to the end). */
    readonly promptTokens: number,
    readonly contextWindow: number,
    readonly estimated = false,
  ) {
    super(`prompt is too long: ${promptTokens} tokens > ${contextWindow - 1} maximum`, "messages");
    this.name = "PromptTooLongError";
    this.maxPromptTokens = contextWindow - 1;
  }

  override messageFor(flavor: ApiFlavor): string {
    const n = `${this.estimated ? "about " : ""}${this.promptTokens}`;
    if (flavor === "openai")
      return `This model's maximum context length is ${this.contextWindow} tokens. However, your messages resulted in ${n} tokens, leaving no room for a completion. Please reduce the length of the messages.`;
    if (flavor === "responses") return `Your input exceeds the context window of this model (${n} tokens; at most ${this.maxPromptTokens} fit). Please adjust your input and try again.`;
    return this.message;
  }

  override paramFor(flavor: ApiFlavor): string | null {
    return flavor === "responses" ? "input" : "messages";
  }
}

export class AuthenticationError extends ProxyError {
  readonly status = 401;
  readonly anthropicType = "authentication_error";
  readonly openaiType = "invalid_request_error";
  override readonly openaiCode = "invalid_api_key";
  constructor(message: string) {
    super(message);
    this.name = "AuthenticationError";
  }
}

export class NotFoundError extends ProxyError {
  readonly status = 404;
  readonly anthropicType = "not_found_error";
  readonly openaiType = "invalid_request_error";
  override readonly openaiCode: string | null;
  override readonly param: string | null;
  constructor(message: string, what: "model" | "route") {
    super(message);
    this.name = "NotFoundError";
    this.openaiCode = what === "model" ? "model_not_found" : "unknown_url";
    this.param = what === "model" ? "model" : null;
  }
}

export class RequestTooLargeError extends ProxyError {
  readonly status = 413;
  readonly anthropicType = "request_too_large";
  readonly openaiType = "invalid_request_error";
  override readonly openaiCode = "request_too_large";
  constructor(readonly limitBytes: number) {
    super(`request body exceeds the proxy's limit of ${limitBytes} bytes`);
    this.name = "RequestTooLargeError";
  }
}

/** The engine failed while serving a call; the session stays usable. */
export class ProxyEngineError extends ProxyError {
  readonly status = 500;
  readonly anthropicType = "api_error";
  readonly openaiType = "server_error";
  constructor(
    readonly sessionId: string,
    readonly turnId: string,
    cause: unknown,
  ) {
    super(`engine failed on turn ${turnId} of session ${sessionId}: ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = "ProxyEngineError";
  }
}

/** No engine answered (not up yet, or gone); the call never started, so the client may retry it. */
export class ProxyEngineUnavailableError extends ProxyError {
  readonly status = 503;
  readonly anthropicType = "api_error";
  readonly openaiType = "server_error";
  constructor(cause: Error) {
    super(`engine unavailable: ${cause.message}`, { cause });
    this.name = "ProxyEngineUnavailableError";
  }
}

/** The client disconnected; nothing is sent back. */
export class ClientGoneError extends Error {
  constructor(
    readonly sessionId: string,
    readonly turnId: string,
  ) {
    super(`client of session ${sessionId} disconnected during turn ${turnId}`);
    this.name = "ClientGoneError";
  }
}

/** Any error as a ProxyError; unknown errors become a 500 without leaking internals beyond the message. */
export function asProxyError(e: unknown): ProxyError {
  if (e instanceof ProxyError) return e;
  return new (class extends ProxyError {
    readonly status = 500;
    readonly anthropicType = "api_error";
    readonly openaiType = "server_error";
  })(`internal proxy error: ${(e as Error)?.message ?? String(e)}`);
}

export function errorBody(flavor: ApiFlavor, e: ProxyError): Record<string, unknown> {
  const message = e.messageFor(flavor);
  if (flavor === "anthropic") return { type: "error", error: { type: e.anthropicType, message } };
  return { error: { message, type: e.openaiType, param: e.paramFor(flavor), code: e.openaiCode } };
}
