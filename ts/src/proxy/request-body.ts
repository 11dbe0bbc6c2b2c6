/**
 * Reading a request's body and parsing its JSON: the chunks are gathered without
 * buffering past the size limit, and the history a session's previous call already
 * sent is not parsed again (growing-body.ts).
 */
import type { IncomingMessage } from "node:http";
import { ClientGoneError, InvalidRequestError, RequestTooLargeError } from "./errors.ts";
import { GrowingBodyParser } from "./growing-body.ts";

/**
 * Where a body that arrived in several chunks is put together to be parsed. One
 * for the process: gathering and parsing are one synchronous step, and the parser
 * keeps no reference to the bytes. A Buffer.concat per call was a new off-heap
 * block of the body's size (bodies over 64 KB arrive in more than one read), and
 * off-heap growth is what starts V8's full collections in the proxy.
 */
let gathered = Buffer.alloc(0);

function gather(chunks: Buffer[], size: number): Buffer {
  if (chunks.length === 1) return chunks[0]!;
  if (size > gathered.length) gathered = Buffer.allocUnsafe(Math.max(size, 2 * gathered.length));
  let at = 0;
  for (const c of chunks) at += c.copy(gathered, at);
  return gathered.subarray(0, size);
}

/** The body's JSON; the history a session's previous call already sent is not parsed again (growing-body.ts). */
export function parseBody(bodies: Map<string, GrowingBodyParser>, path: string, body: { chunks: Buffer[]; size: number }): unknown {
  const bytes = gather(body.chunks, body.size);
  let parser = bodies.get(path);
  if (!parser) {
    parser = new GrowingBodyParser(path === "/v1/responses" ? "input" : "messages");
    bodies.set(path, parser);
  }
  try {
    return parser.parse(bytes);
  } catch (e) {
    throw new InvalidRequestError(`body is not valid JSON: ${(e as Error).message}`);
  }
}

/** Reads the body's chunks without buffering past `limit`; an oversized body stops being read (the connection is closed after the 413). */
export function readBody(req: IncomingMessage, limit: number): Promise<{ chunks: Buffer[]; size: number }> {
  return new Promise((resolve, reject) => {
    if (Number(req.headers["content-length"] ?? NaN) > limit) return reject(new RequestTooLargeError(limit));
    let chunks: Buffer[] = [];
    let size = 0;
    // The request lives until its reply is sent, and so do its listeners: they
    // must let go of the body once it is read. A listener holding `resolve`
    // would keep the settled promise, and with it the body, alive while the
    // engine works on this call.
    const detach = () => {
      req.off("data", onData).off("end", onEnd).off("error", onError).off("close", onClose);
      // A later socket error (the client hanging up after a 413) must not go unhandled.
      if (req.listenerCount("error") === 0) req.on("error", ignoreError);
      chunks = [];
    };
    const fail = (e: unknown) => {
      detach();
      reject(e);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.pause();
        fail(new RequestTooLargeError(limit));
      } else chunks.push(chunk);
    };
    const onEnd = () => {
      const body = { chunks, size };
      detach();
      resolve(body);
    };
    const onError = (e: Error) => fail(e);
    // A client that hangs up mid-upload gets no answer; the handler must not wait forever.
    const onClose = () => {
      if (!req.complete) fail(new ClientGoneError("(request body)", "(none)"));
    };
    req.on("data", onData).on("end", onEnd).on("error", onError).on("close", onClose);
  });
}

function ignoreError(): void {}
