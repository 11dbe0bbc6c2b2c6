import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { BenchRecordError, DOC_PATH, headlineTable, parseRecords, RECORDS_PATH, withTable } from "./table.ts";

const rec = (bench: string, at: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ at, load: "1.0–1.2", command: `pnpm bench:${bench}`, result: { bench, ...extra } });

describe("the benchmarks' headline table", () => {
  it("in docs/benchmarks.md is what docs/benchmarks.jsonl generates (run `pnpm bench:table`)", () => {
    const doc = readFileSync(DOC_PATH, "utf8");
    expect(withTable(doc, headlineTable(parseRecords(readFileSync(RECORDS_PATH, "utf8"))))).toBe(doc);
  });

  it("shows the newest run of each benchmark, with its time, load and command", () => {
    const table = headlineTable(parseRecords([rec("trainer", "2026-12-01T10:00Z", { vs_trl: 1.2 }), rec("trainer", "2026-12-03T07:41Z", { vs_trl: 1.47 })].join("\n")));
    expect(table).toContain("| trainer | vs_trl 1.47 | 2026-12-03 07:41 UTC | 1.0–1.2 | `pnpm bench:trainer` |");
    expect(table).not.toContain("vs_trl 1.2");
  });

  it("refuses a record that is not a benchmark's line, naming the line", () => {
    expect(() => parseRecords(`${rec("x", "2026-12-01T10:00Z")}\nnot json`, "r.jsonl")).toThrow(/r\.jsonl:2: not JSON/);
    expect(() => parseRecords(JSON.stringify({ at: "yesterday", load: "1", command: "c", result: { bench: "x" } }), "r.jsonl")).toThrow(BenchRecordError);
    expect(() => parseRecords(JSON.stringify({ at: "2026-12-01T10:00Z", load: "1", command: "c", result: {} }), "r.jsonl")).toThrow(/must be a benchmark's last line/);
  });
});
