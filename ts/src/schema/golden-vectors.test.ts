/**
 * Golden vectors: TypeScript reads what Python wrote and writes what it reads.
 * Arrow files differ between the languages only in flatbuffer layout; values,
 * schema and metadata must match. msgpack control messages are byte-identical.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { decodeBatch } from "./arrow-decode.ts";
import { recordDifferences } from "./compare.ts";
import { decodeControl, encodeControl } from "./control-codec.ts";
import { REPO_ROOT } from "../repo-root.ts";
import { arrowCases, encodeCase, loadCases, writeVectors } from "./vectors.ts";

const VECTORS = join(REPO_ROOT, "schemas/vectors");
const PYTHON = join(REPO_ROOT, ".venv/bin/python");
const cases = loadCases();
const committed = arrowCases(cases).filter((c) => c.commit);

describe("golden Arrow vectors", () => {
  it.each(committed.map((c) => [c.name, c] as const))("%s: the TS writer reproduces its committed vector byte for byte", (_, c) => {
    const bytes = readFileSync(join(VECTORS, "ts", `${c.name}.arrow`));
    expect(Buffer.from(encodeCase(c)).equals(bytes), "stale vector: run `pnpm exec tsx src/schema/vectors.ts write ../schemas/vectors/ts`").toBe(true);
  });

  it.each(committed.map((c) => [c.name, c] as const))("%s: the Python vector decodes to exactly the expected records", (_, c) => {
    const decoded = decodeBatch(readFileSync(join(VECTORS, "py", `${c.name}.arrow`)), c.record);
    expect(decoded.routing).toEqual(c.routing);
    expect(recordDifferences(c.rows(), decoded.rows)).toEqual([]);
  });

  it.each(committed.map((c) => [c.name, c] as const))("%s: both languages write the same schema and metadata", (_, c) => {
    const ts = decodeBatch(readFileSync(join(VECTORS, "ts", `${c.name}.arrow`)));
    const py = decodeBatch(readFileSync(join(VECTORS, "py", `${c.name}.arrow`)));
    expect(String(ts.batch.schema.fields)).toBe(String(py.batch.schema.fields));
    expect([...ts.batch.schema.metadata]).toEqual([...py.batch.schema.metadata]);
  });

  it("the writer CLI writes every committed case", () => {
    const dir = mkdtempSync(join(tmpdir(), "lego-vectors-"));
    try {
      const written = writeVectors(dir, null, false).map((p) => p.slice(dir.length + 1)).sort();
      expect(written).toEqual(readdirSync(join(VECTORS, "ts")).sort());
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("golden control messages", () => {
  it.each(cases.messages.map((c) => [c.name, c] as const))("%s is byte-identical to the Python encoding", (_, c) => {
    const pyBytes = readFileSync(join(VECTORS, "py", `${c.name}.msgpack`));
    expect(Buffer.from(encodeControl(c.message)).equals(pyBytes)).toBe(true);
    expect(decodeControl(pyBytes)).toEqual(c.message);
  });
});

describe("a 131,072-token segment with 48 x top-8 routing", () => {
  it("crosses from a live Python process intact", { timeout: 120_000 }, () => {
    const dir = mkdtempSync(join(tmpdir(), "lego-vectors-"));
    try {
      execFileSync(PYTHON, ["-m", "lego_rl.schema.vectors", "write", dir, "--case", "trajectories-131k"], { cwd: REPO_ROOT });
      const big = arrowCases(cases).find((c) => c.name === "trajectories-131k")!;
      const decoded = decodeBatch(readFileSync(join(dir, "trajectories-131k.arrow")), "Trajectory");
      const segment = decoded.rows[0]!.segments[0]!;
      expect(segment.token_ids.length).toBe(131072);
      expect(segment.routing!.length).toBe(131072 * 48 * 8);
      expect(recordDifferences(big.rows(), decoded.rows)).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
