import { describe, expect, it } from "vitest";
import { BenchFlagError, benchFlags, positiveInt } from "./flags.ts";

const spec = { n: { default: "30", describe: "pairs" }, source: { describe: "task source" } };

describe("benchmark flags", () => {
  it("take defaults, and values given as --name value", () => {
    expect(benchFlags(spec, [])).toEqual({ n: "30" });
    expect(benchFlags(spec, ["--n", "5", "--source", "builtin"])).toEqual({ n: "5", source: "builtin" });
    expect(benchFlags(spec, ["--", "--n", "5"])).toEqual({ n: "5" });
  });

  it("refuse an unknown flag and list the known ones", () => {
    expect(() => benchFlags(spec, ["--count", "5"])).toThrow(BenchFlagError);
    expect(() => benchFlags(spec, ["--count", "5"])).toThrow(/--n \(pairs, default 30\), --source \(task source\)/);
  });

  it("refuse a count that is not a positive integer, naming the flag", () => {
    expect(positiveInt("n", "12")).toBe(12);
    for (const bad of ["0", "-3", "1.5", "ten", undefined]) expect(() => positiveInt("n", bad)).toThrow(/--n must be a positive integer/);
  });
});
