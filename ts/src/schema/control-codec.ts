/**
 * Control messages <-> msgpack (msgpackr), byte-identical with the Python side.
 *
 * Keys are written in records.toml order with `kind` first and every key
 * present (nil when absent). msgpackr writes JS numbers the way the schema's
 * canonical rule says (integral in [-2^31, 2^32) as the smallest int, else
 * float64), so the TS side needs no normalization; the Python codec mirrors it.
 * `array<T>` fields travel as one msgpack bin of little-endian values; decoding
 * copies them into a fresh typed array (bin payloads sit at arbitrary offsets
 * of the frame, which typed-array views require to be aligned).
 * `encodeControl` and `decodeControl` are each other's opposite.
 */
import { Packr } from "msgpackr";
import { ControlMessageError } from "./errors.ts";
import { CONTROL_KINDS, MESSAGE_FIELDS, type ArrayElement, type ControlKind, type ControlMessage, type MessageFieldDescriptor } from "./generated.ts";

// Plain maps only: msgpackr's record extension and typed-array extensions have no Python reader.
const packr = new Packr({ useRecords: false, moreTypes: false, mapsAsObjects: true, variableMapSize: true });

const ARRAY_CTORS = { int32: Int32Array, float32: Float32Array, uint8: Uint8Array, uint16: Uint16Array } as const;
type PackedArray = Int32Array | Float32Array | Uint8Array | Uint16Array;
// Typed arrays use the host's byte order; the wire is little-endian. Every platform Node
// ships for is little-endian, so refuse loudly rather than carry an untested swap path.
const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** The typed array's bytes as a Uint8Array view (msgpackr writes a Uint8Array as bin). */
function arrayToWire(element: ArrayElement, value: unknown, where: string): Uint8Array {
  const ctor = ARRAY_CTORS[element];
  if (!(value instanceof ctor)) {
    const got = (value as { constructor?: { name?: string } })?.constructor?.name ?? typeof value;
    throw new ControlMessageError(`${where} must be a ${ctor.name}, got ${got}`);
  }
  if (!LITTLE_ENDIAN) throw new ControlMessageError("packed arrays need a little-endian host");
  const array = value as PackedArray;
  return new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
}

function arrayFromWire(element: ArrayElement, value: unknown, where: string): PackedArray {
  if (!(value instanceof Uint8Array)) {
    throw new ControlMessageError(`${where} must be a msgpack bin of little-endian ${element}, got ${Array.isArray(value) ? "array" : typeof value}`);
  }
  const ctor = ARRAY_CTORS[element];
  if (value.byteLength % ctor.BYTES_PER_ELEMENT !== 0) {
    throw new ControlMessageError(`${where} has ${value.byteLength} bytes, not a whole number of ${element} values`);
  }
  if (!LITTLE_ENDIAN) throw new ControlMessageError("packed arrays need a little-endian host");
  const copy = value.buffer.slice(value.byteOffset, value.byteOffset + value.byteLength) as ArrayBuffer;
  return new ctor(copy);
}

function check(desc: MessageFieldDescriptor, value: unknown, where: string, decoding: boolean): unknown {
  if (value === null || value === undefined) {
    if (!desc.nullable) throw new ControlMessageError(`${where}.${desc.name} is required but missing or nil`);
    return null;
  }
  const t = desc.type;
  if (t.kind === "enum") {
    if (!t.values.includes(value as string)) {
      throw new ControlMessageError(`${where}.${desc.name}=${JSON.stringify(value)} is not one of ${t.values.join(", ")}`);
    }
    return value;
  }
  if (t.kind === "strings") {
    if (!Array.isArray(value) || !value.every((v) => typeof v === "string")) {
      throw new ControlMessageError(`${where}.${desc.name} must be a list of strings`);
    }
    return value;
  }
  if (t.kind === "array") {
    return decoding ? arrayFromWire(t.element, value, `${where}.${desc.name}`) : arrayToWire(t.element, value, `${where}.${desc.name}`);
  }
  if (t.kind !== "scalar") throw new ControlMessageError(`${where}.${desc.name} has unsupported kind ${t.kind}`);
  const expected = t.scalar === "string" ? "string" : t.scalar === "bool" ? "boolean" : "number";
  if (typeof value !== expected) {
    throw new ControlMessageError(`${where}.${desc.name} must be a ${expected}, got ${typeof value} ${JSON.stringify(value)}`);
  }
  if (expected === "number" && t.scalar.includes("int") && !Number.isSafeInteger(value)) {
    throw new ControlMessageError(`${where}.${desc.name} must be an integer within +-2^53, got ${String(value)}`);
  }
  return value;
}

function isKind(kind: unknown): kind is ControlKind {
  return typeof kind === "string" && (CONTROL_KINDS as readonly string[]).includes(kind);
}

/** Packs a control message into canonical msgpack bytes. */
export function encodeControl(message: ControlMessage): Uint8Array {
  if (!isKind(message.kind)) throw new ControlMessageError(`unknown control message kind ${JSON.stringify(message.kind)}`);
  const wire: Record<string, unknown> = { kind: message.kind };
  for (const desc of MESSAGE_FIELDS[message.kind]) {
    wire[desc.name] = check(desc, (message as unknown as Record<string, unknown>)[desc.name], message.kind, false);
  }
  return packr.pack(wire);
}

/** Unpacks and checks a control message; throws ControlMessageError naming the problem. */
export function decodeControl(bytes: Uint8Array): ControlMessage {
  let wire: unknown;
  try {
    wire = packr.unpack(bytes);
  } catch (error) {
    throw new ControlMessageError(`control frame of ${bytes.length} bytes is not valid msgpack: ${String(error)}`, { cause: error });
  }
  if (typeof wire !== "object" || wire === null || Array.isArray(wire)) {
    throw new ControlMessageError(`control frame must be a msgpack map, got ${Array.isArray(wire) ? "array" : typeof wire}`);
  }
  const map = wire as Record<string, unknown>;
  if (!isKind(map.kind)) {
    throw new ControlMessageError(`unknown control message kind ${JSON.stringify(map.kind)}; known: ${CONTROL_KINDS.join(", ")}`);
  }
  const message: Record<string, unknown> = { kind: map.kind };
  for (const desc of MESSAGE_FIELDS[map.kind]) message[desc.name] = check(desc, map[desc.name], map.kind, true);
  return message as unknown as ControlMessage;
}
