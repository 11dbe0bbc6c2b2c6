/** Bad input gets an error that names the problem; nothing is silently repaired. */
import { RecordBatch, RecordBatchStreamWriter, Schema } from "apache-arrow";
import { Packr } from "msgpackr";
import { describe, expect, it } from "vitest";
import { decodeBatch } from "./arrow-decode.ts";
import { encodeBatch } from "./arrow-encode.ts";
import { decodeControl, encodeControl } from "./control-codec.ts";
import {
  ControlMessageError, MissingColumnError, RecordShapeError, SchemaError, SchemaVersionError, TruncatedStreamError,
} from "./errors.ts";
import { SCHEMA_MAJOR, SCHEMA_VERSION, type Trajectory } from "./generated.ts";
import { trainableProblems } from "./validate.ts";
import { arrowCases } from "./vectors.ts";

const moe = arrowCases().find((c) => c.name === "trajectories-moe-u8")!;
const rows = () => moe.rows() as Trajectory[];
const packr = new Packr({ useRecords: false });

/** The Trajectory columns schema 2.3 appended (records.toml: `since = "2.3"`). */
const COLUMNS_2_3 = ["tool_call_parse_failures", "tokens", "stage_seconds", "min_policy_version", "max_policy_version", "trainer_version_at_ship", "stale", "over_length"];

/** The moe case's batch written at `version`, without the 2.3 columns (as a 2.2 writer wrote it). */
function without23(version: string): Uint8Array {
  const batch = decodeBatch(encodeBatch("Trajectory", rows(), moe.routing, { version })).batch;
  const selected = batch.select(batch.schema.fields.map((f) => f.name).filter((n) => !COLUMNS_2_3.includes(n)));
  return RecordBatchStreamWriter.writeAll([new RecordBatch(new Schema(selected.schema.fields, batch.schema.metadata), selected.data)]).toUint8Array(true);
}

describe("decodeBatch reads", () => {
  it("a batch written before a MINOR release with the columns it added as null", () => {
    const decoded = decodeBatch(without23(`${SCHEMA_MAJOR}.2.0`), "Trajectory");
    expect(decoded.schemaVersion).toBe(`${SCHEMA_MAJOR}.2.0`);
    const first = decoded.rows[0]! as unknown as Record<string, unknown>;
    expect(COLUMNS_2_3.map((n) => first[n])).toEqual(COLUMNS_2_3.map(() => null));
    expect(decoded.rows[0]!.metrics.tool_calls).toBe(1);
    expect(decoded.rows[0]!.segments).toHaveLength(3);
  });

  it("a null struct as null beside set ones", () => {
    const back = decodeBatch(encodeBatch("Trajectory", rows(), moe.routing), "Trajectory").rows;
    expect(back[0]!.over_length).toEqual({ action: "truncated", tokens: 4096, limit: 2048 });
    expect(back[1]!.over_length).toBeNull();
    expect(back[1]!.stage_seconds).toEqual({ setup: 0.5, agent: null, grading: null });
  });
});

describe("decodeBatch refuses", () => {
  it("a stream cut anywhere, naming its length", () => {
    const bytes = encodeBatch("Trajectory", rows(), moe.routing);
    for (const cut of [0, 7, bytes.length / 3, bytes.length / 2, bytes.length - 8, bytes.length - 1].map(Math.floor)) {
      expect(() => decodeBatch(bytes.subarray(0, cut))).toThrow(TruncatedStreamError);
      expect(() => decodeBatch(bytes.subarray(0, cut))).toThrow(`${cut} bytes`);
    }
  });

  it("garbage that ends like a stream, as corrupt", () => {
    const garbage = new Uint8Array(72);
    garbage.set([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0], 64);
    expect(() => decodeBatch(garbage)).toThrow(TruncatedStreamError);
  });

  it("an unknown major version, naming both versions", () => {
    const other = `${SCHEMA_MAJOR + 1}.0.0`;
    const bytes = encodeBatch("Trajectory", rows(), moe.routing, { version: other });
    expect(() => decodeBatch(bytes)).toThrow(SchemaVersionError);
    expect(() => decodeBatch(bytes)).toThrow(new RegExp(`schema version ${other.replaceAll(".", "\\.")}.*speaks ${SCHEMA_VERSION.replaceAll(".", "\\.")}`));
  });

  it("a missing required column, naming it", () => {
    const batch = decodeBatch(encodeBatch("Trajectory", rows(), moe.routing)).batch;
    const keep = batch.schema.fields.filter((f) => f.name !== "status").map((f) => f.name);
    const selected = batch.select(keep);
    const schema = new Schema(selected.schema.fields, batch.schema.metadata);
    const stripped = new RecordBatch(schema, selected.data);
    const bytes = RecordBatchStreamWriter.writeAll([stripped]).toUint8Array(true);
    expect(() => decodeBatch(bytes)).toThrow(MissingColumnError);
    expect(() => decodeBatch(bytes)).toThrow("no column 'status'");
  });

  it("a batch of the current MINOR without a column that MINOR added, naming it", () => {
    expect(() => decodeBatch(without23(SCHEMA_VERSION))).toThrow(MissingColumnError);
    expect(() => decodeBatch(without23(SCHEMA_VERSION))).toThrow("no column 'tool_call_parse_failures'");
  });

  it("version and over-length fields that contradict each other", () => {
    const cases: [Partial<Trajectory>, string][] = [
      [{ max_policy_version: null }, "must both be set or both null"],
      [{ min_policy_version: 9, max_policy_version: 8 }, "min_policy_version 9 is above max_policy_version 8"],
      [{ trainer_version_at_ship: null }, "stale is true but min_policy_version or trainer_version_at_ship is null"],
      [{ over_length: { action: "truncated", tokens: 10, limit: 2048 } }, "10 tokens over a limit of 2048"],
      [{ over_length: { action: "dropped", tokens: 4096, limit: 2048 } }, "an over-length drop ships no segments and no reward"],
    ];
    for (const [change, message] of cases) {
      const bad = rows();
      Object.assign(bad[0]!, change);
      expect(() => encodeBatch("Trajectory", bad, moe.routing)).toThrow(message);
      expect(() => decodeBatch(encodeBatch("Trajectory", bad, moe.routing, { validate: false }))).toThrow(RecordShapeError);
    }
  });

  it("routing whose length is not tokens x layers x top_k", () => {
    const bad = rows();
    const segment = bad[0]!.segments[0]!;
    segment.routing = segment.routing!.subarray(0, segment.routing!.length - 1);
    const message = "segment 'seg-main-0': routing has 183 values; expected tokens x layers x top_k = 23 x 4 x 2 = 184";
    expect(() => encodeBatch("Trajectory", bad, moe.routing)).toThrow(message);
    const bytes = encodeBatch("Trajectory", bad, moe.routing, { validate: false });
    expect(() => decodeBatch(bytes)).toThrow(RecordShapeError);
    expect(() => decodeBatch(bytes)).toThrow(message);
  });

  it("a trainable token the policy did not sample", () => {
    const bad = rows();
    bad[0]!.segments[0]!.loss_mask[0] = 1;
    const bytes = encodeBatch("Trajectory", bad, moe.routing, { validate: false });
    expect(() => decodeBatch(bytes)).toThrow("token 0 has loss_mask 1 but was not sampled");
  });

  it("an unknown status when encoding", () => {
    const bad = rows();
    (bad[0] as { status: string }).status = "succeeded";
    expect(() => encodeBatch("Trajectory", bad, moe.routing)).toThrow(SchemaError);
    expect(() => encodeBatch("Trajectory", bad, moe.routing)).toThrow(`status="succeeded" is not one of`);
  });
});

describe("NaN and infinite logprobs", () => {
  it("are preserved bit-exactly but reported as untrainable", () => {
    const original = rows();
    const [decoded] = decodeBatch(encodeBatch("Trajectory", original, moe.routing), "Trajectory").rows;
    const logprobs = decoded!.segments[0]!.logprobs;
    expect([logprobs[10], logprobs[11], logprobs[12]]).toEqual([NaN, Infinity, -Infinity]);
    expect(Buffer.from(logprobs.buffer, logprobs.byteOffset, logprobs.byteLength)).toEqual(
      Buffer.from(original[0]!.segments[0]!.logprobs.buffer),
    );
    expect(trainableProblems(decoded!)).toEqual(["3 trainable token(s) have a non-finite rollout logprob (NaN or inf)"]);
  });
});

describe("decodeControl reads across MINOR versions", () => {
  it("past the keys a newer MINOR added, and the nullable ones an older MINOR lacks as null", () => {
    // A 2.4 client's generate reaches a 2.3 engine with a key that engine does not know, and the reverse.
    expect(decodeControl(packr.pack({ kind: "abort", request_id: "r", from_a_later_minor: true }))).toEqual({ kind: "abort", request_id: "r" });
    const older = { kind: "generate", request_id: "r", model: null, policy_version: null, prompt_token_ids: Uint8Array.of(1, 0, 0, 0), temperature: 0, top_p: 1, max_tokens: 1, stop_token_ids: new Uint8Array(0), seed: null, stream: true };
    expect(decodeControl(packr.pack(older))).toMatchObject({ kind: "generate", stream: true, final_tokens_in_result: null });
  });
});

describe("decodeControl refuses", () => {
  it("bytes that are not a msgpack map", () => {
    expect(() => decodeControl(Uint8Array.of(0xc1))).toThrow(ControlMessageError);
    expect(() => decodeControl(packr.pack([1, 2]))).toThrow("must be a msgpack map, got array");
  });

  it("an unknown kind, listing the known ones", () => {
    expect(() => decodeControl(packr.pack({ kind: "nack" }))).toThrow(`unknown control message kind "nack"; known: batch, ack`);
  });

  it("a missing or mistyped field", () => {
    expect(() => decodeControl(packr.pack({ kind: "ack", status: "accepted", reason: null }))).toThrow("ack.batch_id is required");
    expect(() => decodeControl(packr.pack({ kind: "credit", receiver_id: "r", credits: "16", max_batch_bytes: 1 }))).toThrow(
      "credit.credits must be a number, got string",
    );
  });

  it("integers beyond 2^53 when encoding", () => {
    expect(() => encodeControl({ kind: "weight_version", version: 2 ** 53 + 2, published_at_ms: 0, checkpoint_path: null })).toThrow(
      "within +-2^53",
    );
  });
});

describe("packed arrays in control messages", () => {
  const chunk = (token_ids: unknown) => ({ kind: "token_chunk", request_id: "r", token_ids, logprobs: new Float32Array(1), policy_version: 0 }) as unknown as Parameters<typeof encodeControl>[0];

  it("must be the declared typed array", () => {
    expect(() => encodeControl(chunk([1, 2]))).toThrow(/token_chunk.token_ids must be a Int32Array, got Array/);
    expect(() => encodeControl(chunk(new Uint32Array(2)))).toThrow(/must be a Int32Array, got Uint32Array/);
  });

  it("must arrive as a bin holding whole values", () => {
    const wire = new Packr({ useRecords: false, mapsAsObjects: true }).unpack(encodeControl(chunk(new Int32Array([1, 2])))) as Record<string, unknown>;
    const repack = (v: unknown) => new Packr({ useRecords: false }).pack({ ...wire, token_ids: v });
    expect(() => decodeControl(repack(new Uint8Array(7)))).toThrow(/has 7 bytes, not a whole number of int32 values/);
    expect(() => decodeControl(repack([1, 2]))).toThrow(/must be a msgpack bin of little-endian int32, got array/);
  });
});
