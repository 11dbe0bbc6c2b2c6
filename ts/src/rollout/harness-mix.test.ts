/** `--harness a=0.5,b=0.5`: parsing, bad specs named, the per-group assignment, and the config file's table spelling. */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { emptyAgent, oracleAgent } from "../tasks/index.ts";
import { HarnessAssigner, HarnessMixError, mixedLauncher, parseHarnessMix } from "./harness-mix.ts";
import { WorkerConfigError, buildWorkerConfig, readWorkerConfigFile } from "./index.ts";

const dir = mkdtempSync(join(tmpdir(), "lego-rollout-mix-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("harness mix", () => {
  it("parses one name or NAME=WEIGHT pairs adding up to 1", () => {
    expect(parseHarnessMix("reference")).toEqual([{ name: "reference", weight: 1 }]);
    expect(parseHarnessMix("claude-code=0.5, opencode=0.3,reference=0.2")).toEqual([
      { name: "claude-code", weight: 0.5 }, { name: "opencode", weight: 0.3 }, { name: "reference", weight: 0.2 },
    ]);
  });

  it("names what is wrong with a bad spec", () => {
    expect(() => parseHarnessMix("a=0.5,b=0.6")).toThrow(/add up to 1.1, not 1/);
    expect(() => parseHarnessMix("a=0.5,a=0.5")).toThrow(/a is named twice/);
    expect(() => parseHarnessMix("a=0,b=1")).toThrow(/weight of a must be a number > 0/);
    expect(() => parseHarnessMix("a=half,b=0.5")).toThrow(/weight of a/);
    expect(() => parseHarnessMix("a=0.5,b")).toThrow(/"b" is not NAME=WEIGHT/);
    expect(() => parseHarnessMix("Not A Name")).toThrow(HarnessMixError);
  });

  it("assigns groups in proportion to the weights, as closely as whole groups allow", () => {
    const shares = parseHarnessMix("claude-code=0.5,opencode=0.3,reference=0.2");
    const a = new HarnessAssigner(shares);
    const picks = Array.from({ length: 100 }, () => a.next());
    const count = (i: number, upTo = 100) => picks.slice(0, upTo).filter((p) => p === i).length;
    expect([count(0), count(1), count(2)]).toEqual([50, 30, 20]);
    // At every prefix each harness is within one group of its share.
    for (let n = 1; n <= 100; n++) for (const [i, s] of shares.entries()) expect(Math.abs(count(i, n) - s.weight * n)).toBeLessThanOrEqual(1);
    // Deterministic: the same source gets the same assignment.
    const b = new HarnessAssigner(shares);
    expect(Array.from({ length: 100 }, () => b.next())).toEqual(picks);
  });

  it("a mixed launcher gives every rollout of a group the same harness", () => {
    const mix = mixedLauncher([{ share: { name: "oracle", weight: 0.5 }, launcher: oracleAgent }, { share: { name: "empty", weight: 0.5 }, launcher: emptyAgent }]);
    const g0 = mix.forGroup("g0");
    expect(mix.forGroup("g0")).toBe(g0);
    expect(mix.forGroup("g1")).not.toBe(g0);
    expect(new Set(["g0", "g1", "g2", "g3"].map((g) => mix.forGroup(g).name))).toEqual(new Set(["oracle", "empty"]));
  });

  it("the config file takes the mix as a string or a [harness] table; the flag overrides it; an engine is still required", () => {
    const write = (name: string, text: string) => {
      writeFileSync(join(dir, name), text);
      return join(dir, name);
    };
    const head = 'tasks = "easy"\ntrainer = "tcp://127.0.0.1:5555"\nengine = "scripted-gold"\n';
    expect(readWorkerConfigFile(write("s.toml", `${head}harness = "reference=0.5,claude-code=0.5"\n`)).harness).toBe("reference=0.5,claude-code=0.5");
    const table = readWorkerConfigFile(write("t.toml", `${head}[harness]\nreference = 0.2\nclaude-code = 0.8\n`));
    expect(table.harness).toBe("reference=0.2,claude-code=0.8");
    expect(buildWorkerConfig(table, {}).harness).toBe("reference=0.2,claude-code=0.8");
    expect(buildWorkerConfig(table, { harness: "reference" }).harness).toBe("reference");
    expect(() => readWorkerConfigFile(write("u.toml", `${head}[harness]\nreference = "a lot"\n`))).toThrow(/\[harness\] reference must be a number/);
    expect(() => buildWorkerConfig(table, { harness: "reference=0.7,oracle=0.7" })).toThrow(WorkerConfigError);
    const base = { tasks: "easy", trainer: "tcp://127.0.0.1:1" };
    expect(() => buildWorkerConfig({}, { ...base, harness: "oracle=0.5,claude-code=0.5" })).toThrow(/--harness claude-code needs --engine/);
    expect(buildWorkerConfig({}, { ...base, harness: "oracle=0.5,empty=0.5" }).harness).toBe("oracle=0.5,empty=0.5");
  });
});
