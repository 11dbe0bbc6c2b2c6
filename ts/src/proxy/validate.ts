/** Field readers for request bodies: each names the field path it rejects. */
import { InvalidRequestError } from "./errors.ts";

export type Json = Record<string, unknown>;

/**
 * Results of parsing a request body's values, remembered per value object. A
 * session's bodies repeat their history and tool list, and the body parser hands
 * those back as the same objects (growing-body.ts), so each message and tool list
 * is checked and converted once, and later calls get the same neutral objects
 * (their comparison with the recorded history is then an identity check). A value
 * that fails is not remembered: it fails the same way every time.
 */
export class ParsedValues<T> {
  private readonly byValue = new WeakMap<object, T>();

  get(raw: unknown, parse: (raw: unknown) => T): T {
    if (typeof raw !== "object" || raw === null) return parse(raw);
    let parsed = this.byValue.get(raw);
    if (parsed === undefined) {
      parsed = parse(raw);
      this.byValue.set(raw, parsed);
    }
    return parsed;
  }
}

export function obj(v: unknown, path: string): Json {
  if (!v || typeof v !== "object" || Array.isArray(v)) throw new InvalidRequestError(`${path}: expected an object`, path);
  return v as Json;
}

export function arr(v: unknown, path: string): unknown[] {
  if (!Array.isArray(v)) throw new InvalidRequestError(`${path}: expected an array`, path);
  return v;
}

export function str(v: unknown, path: string): string {
  if (typeof v !== "string") throw new InvalidRequestError(`${path}: expected a string`, path);
  return v;
}

export function optStr(v: unknown, path: string): string | undefined {
  return v === undefined || v === null ? undefined : str(v, path);
}

export function optBool(v: unknown, path: string): boolean | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "boolean") throw new InvalidRequestError(`${path}: expected a boolean`, path);
  return v;
}

export function optNum(v: unknown, path: string, min = -Infinity, max = Infinity): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max)
    throw new InvalidRequestError(`${path}: expected a number in [${min}, ${max}]`, path);
  return v;
}

export function optInt(v: unknown, path: string, min = -Infinity): number | undefined {
  const n = optNum(v, path, min);
  if (n !== undefined && !Number.isInteger(n)) throw new InvalidRequestError(`${path}: expected an integer`, path);
  return n;
}

/**
 * Nucleus mass: every engine samples from a nucleus of mass in (0, 1] and refuses 0,
 * which would leave no token to sample; greedy decoding is temperature 0.
 */
export function optTopP(v: unknown, path: string): number | undefined {
  const p = optNum(v, path, 0, 1);
  if (p === 0) throw new InvalidRequestError(`${path}: must be in (0, 1]; for greedy decoding set temperature to 0`, path);
  return p;
}

/** A sampling seed: an integer the engine's control messages carry exactly (JavaScript numbers: |seed| < 2^53). */
export function optSeed(v: unknown, path: string): number | undefined {
  const n = optInt(v, path);
  if (n !== undefined && !Number.isSafeInteger(n)) throw new InvalidRequestError(`${path}: must be an integer of magnitude below 2^53 (9007199254740992)`, path);
  return n;
}

/** Tool names the way OpenAI and Anthropic accept them. */
const TOOL_NAME = /^[a-zA-Z0-9_.:-]{1,128}$/;

export function toolName(v: unknown, path: string): string {
  const name = str(v, path);
  if (!TOOL_NAME.test(name)) throw new InvalidRequestError(`${path}: tool name must match ${TOOL_NAME}`, path);
  return name;
}

/** A tool's argument schema must be a JSON Schema object of type "object". */
export function toolSchema(v: unknown, path: string): Json {
  if (v === undefined || v === null) return { type: "object", properties: {} };
  const s = obj(v, path);
  if (s["type"] !== undefined && s["type"] !== "object")
    throw new InvalidRequestError(`${path}.type: a tool's schema must have type "object"`, path);
  if (s["properties"] !== undefined) obj(s["properties"], `${path}.properties`);
  return s;
}
