/**
 * Golden vectors: expands schemas/vectors/cases.json into records and writes them.
 * The formulas are specified in schemas/vectors/README.md and mirrored in
 * python-bridge/lego_rl/schema/vectors.py; both sides must produce identical values.
 *
 *   tsx src/schema/vectors.ts write DIR [--case NAME ...] [--include-large]
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { encodeBatch } from "./arrow-encode.ts";
import { encodeControl } from "./control-codec.ts";
import { MESSAGE_FIELDS, type ArrowRecordName, type ControlMessage, type Trajectory, type Turn } from "./generated.ts";
import { REPO_ROOT } from "../repo-root.ts";
import { checkRoutingShape, type RoutingShape } from "./routing.ts";
import { buildTrajectory, buildTurn, SPECIAL, type TrajectorySpec, type TurnRecordSpec } from "./synthetic.ts";

export const CASES_PATH = join(REPO_ROOT, "schemas/vectors/cases.json");

export interface BatchCase<S> { name: string; commit?: boolean; routing: RoutingShape | null; rows: S[] }
export interface MessageCase { name: string; message: ControlMessage }
export interface Cases {
  trajectory_batches: BatchCase<TrajectorySpec>[];
  turn_batches: BatchCase<TurnRecordSpec>[];
  messages: MessageCase[];
}

export function loadCases(): Cases {
  const cases = JSON.parse(readFileSync(CASES_PATH, "utf8")) as Cases;
  for (const c of cases.messages) c.message = packedArrays(c.message);
  return cases;
}

/** cases.json writes `array<T>` fields as JSON lists (floats may be "nan", "inf", "-inf"); the codec wants typed arrays. */
function packedArrays(message: ControlMessage): ControlMessage {
  const out = { ...message } as Record<string, unknown>;
  for (const desc of MESSAGE_FIELDS[message.kind]) {
    const value = out[desc.name];
    if (desc.type.kind !== "array" || !Array.isArray(value)) continue;
    const ctor = { int32: Int32Array, float32: Float32Array, uint8: Uint8Array, uint16: Uint16Array }[desc.type.element];
    out[desc.name] = ctor.from(value.map((v: number | string) => (typeof v === "string" ? SPECIAL[v]! : v)));
  }
  return out as unknown as ControlMessage;
}

export interface ArrowCase { record: ArrowRecordName; name: string; commit: boolean; routing: RoutingShape | null; rows: () => (Trajectory | Turn)[] }

/** Every Arrow case with a lazy builder (the large one allocates ~50 MB). */
export function arrowCases(cases: Cases = loadCases()): ArrowCase[] {
  const shape = (r: RoutingShape | null) => (r ? checkRoutingShape(r) : null);
  return [
    ...cases.trajectory_batches.map((c) => ({
      record: "Trajectory" as const, name: c.name, commit: c.commit !== false, routing: shape(c.routing),
      rows: () => c.rows.map((r) => buildTrajectory(r, shape(c.routing))),
    })),
    ...cases.turn_batches.map((c) => ({
      record: "Turn" as const, name: c.name, commit: c.commit !== false, routing: shape(c.routing),
      rows: () => c.rows.map((r) => buildTurn(r, shape(c.routing))),
    })),
  ];
}

export function encodeCase(c: ArrowCase): Uint8Array {
  return encodeBatch(c.record, c.rows() as never[], c.routing);
}

export function writeVectors(out: string, names: Set<string> | null, includeLarge: boolean): string[] {
  mkdirSync(out, { recursive: true });
  const cases = loadCases();
  const written: string[] = [];
  for (const c of arrowCases(cases)) {
    if (names ? !names.has(c.name) : !c.commit && !includeLarge) continue;
    const path = join(out, `${c.name}.arrow`);
    writeFileSync(path, encodeCase(c));
    written.push(path);
  }
  for (const c of cases.messages) {
    if (names && !names.has(c.name)) continue;
    const path = join(out, `${c.name}.msgpack`);
    writeFileSync(path, encodeControl(c.message));
    written.push(path);
  }
  return written;
}

function main(argv: string[]): void {
  const [command, dir, ...rest] = argv;
  if (command !== "write" || !dir) {
    console.error("usage: tsx src/schema/vectors.ts write DIR [--case NAME ...] [--include-large]");
    process.exit(2);
  }
  const names = new Set<string>();
  for (let i = 0; i < rest.length; i++) if (rest[i] === "--case" && rest[i + 1]) names.add(rest[++i]!);
  for (const path of writeVectors(dir, names.size ? names : null, rest.includes("--include-large"))) console.log(path);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main(process.argv.slice(2));
