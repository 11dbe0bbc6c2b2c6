/** The worker's config: defaults ← TOML file ← flags; unknown keys and bad values are clear errors. */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { spawnSync } from "node:child_process";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DEFAULT_WORKER_CONFIG, WorkerConfigError, buildWorkerConfig, readWorkerConfigFile } from "./index.ts";

const dir = mkdtempSync(join(tmpdir(), "lego-rollout-cfg-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, text: string) => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};

describe("worker config", () => {
  it("layers defaults, the file and flags (flags win; undefined flags do not override)", () => {
    const f = readWorkerConfigFile(file("a.toml", 'tasks = "easy"\nharness = "oracle"\ntrainer = "tcp://127.0.0.1:5555"\ngroup_size = 8\nmax_staleness = 2\n'));
    const cfg = buildWorkerConfig(f, { groupSize: 3, concurrency: undefined });
    expect(cfg).toMatchObject({ tasks: "easy", harness: "oracle", groupSize: 3, maxStaleness: 2, concurrency: DEFAULT_WORKER_CONFIG.concurrency });
  });

  it("rejects unknown keys, wrong types and bad values with the field named", () => {
    expect(() => readWorkerConfigFile(file("b.toml", "group_sise = 4\n"))).toThrow(/unknown key "group_sise"/);
    expect(() => readWorkerConfigFile(file("c.toml", 'group_size = "4"\n'))).toThrow(/group_size must be an integer/);
    expect(() => readWorkerConfigFile(file("d.toml", "group_size = \n"))).toThrow(WorkerConfigError);
    const base = { tasks: "easy", harness: "oracle", trainer: "tcp://127.0.0.1:1" };
    expect(() => buildWorkerConfig({}, { ...base, groupSize: 0 })).toThrow(/--group-size must be a positive integer/);
    expect(() => buildWorkerConfig({}, { ...base, trainer: "http://x" })).toThrow(/--trainer must be a tcp/);
    expect(() => buildWorkerConfig({}, { ...base, harness: "claude-code" })).toThrow(/needs --engine/);
    expect(() => buildWorkerConfig({}, { harness: "oracle", trainer: base.trainer })).toThrow(/tasks is required/);
    expect(() => buildWorkerConfig({}, { ...base, maxStaleness: -1 })).toThrow(/--max-staleness/);
    // A real engine's address needs the model it serves (the proxy's tokenizer); sampling must be a distribution.
    const real = { ...base, harness: "reference", engine: "tcp://127.0.0.1:5556" };
    expect(() => buildWorkerConfig({}, real)).toThrow(/--engine tcp:\/\/127.0.0.1:5556 needs --model-dir/);
    expect(() => buildWorkerConfig({}, { ...real, engine: "unix:///run/engine.sock" })).toThrow(/--engine unix:\/\/\/run\/engine.sock needs --model-dir/);
    expect(() => buildWorkerConfig({}, { ...real, modelDir: "/m", temperature: 0 })).toThrow(/--temperature must be > 0/);
    expect(() => buildWorkerConfig({}, { ...real, modelDir: "/m", maxTokensPerTurn: 0 })).toThrow(/--max-tokens-per-turn must be a positive integer/);
    expect(() => readWorkerConfigFile(file("t.toml", 'temperature = "hot"\n'))).toThrow(/temperature must be a number/);
  });

  it("reads the real-engine fields from the file (sampling defaults: temperature 1)", () => {
    const f = readWorkerConfigFile(file("r.toml", 'tasks = "easy"\nharness = "reference"\ntrainer = "tcp://127.0.0.1:5555"\nengine = "tcp://127.0.0.1:5556"\nmodel_dir = "/models/tiny"\nmax_tokens_per_turn = 64\nmax_turns = 4\n'));
    expect(buildWorkerConfig(f, {})).toMatchObject({ engine: "tcp://127.0.0.1:5556", modelDir: "/models/tiny", temperature: 1, maxTokensPerTurn: 64, maxTurns: 4 });
    expect(buildWorkerConfig(f, { temperature: 0.7 }).temperature).toBe(0.7);
  });
});

describe("lego rollout with a bad config", () => {
  it("exits 1 naming the problem, before touching Docker or the network", () => {
    const lego = resolve(import.meta.dirname, "../../bin/lego");
    const bad = spawnSync(lego, ["rollout", "--config", file("e.toml", "group_sise = 2\n")], { encoding: "utf8", timeout: 60_000 });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain('lego rollout: ');
    expect(bad.stderr).toContain('unknown key "group_sise"');
    expect(bad.stderr).not.toContain("    at ");
    const noTrainer = spawnSync(lego, ["rollout", "--tasks", "easy", "--harness", "oracle"], { encoding: "utf8", timeout: 60_000 });
    expect(noTrainer.status).toBe(1);
    expect(noTrainer.stderr).toContain("trainer is required");
    // The oracle has no engine, so a staleness bound could never be checked: refused, not ignored.
    const stale = spawnSync(lego, ["rollout", "--tasks", "easy:seed=7,count=1", "--harness", "oracle", "--trainer", "tcp://127.0.0.1:9", "--max-staleness", "1"], { encoding: "utf8", timeout: 60_000 });
    expect(stale.status).toBe(1);
    expect(stale.stderr).toContain("--max-staleness needs the sampling policy version");
  });
});
