/**
 * The over-length policy and the non-terminal log end to end: `lego rollout
 * --harness reference --engine scripted-gold --max-sequence-tokens N` with
 * the real reference agent in real sandboxes into the real receiver, its
 * stdout not a terminal. `truncate` ships every trajectory with its segments
 * (and loss mask) cut to N; `drop` ships each as a record with no segments and
 * no reward, and says why. Either way the record itself carries the verdict
 * (`over_length`: action, original length, limit). Every stdout line is one
 * JSON event; the last is the summary with the counts, failures, tokens,
 * throughput and time per stage.
 */
import { execFile, spawnSync } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { PYTHON } from "../json-line-process.ts";
import { receiverFixture } from "./test-support.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const work = mkdtempSync(join(tmpdir(), "lego-rollout-overlen-"));
const G = 2;
const LIMIT = 300;

async function rollout(policy: "truncate" | "drop", trainer: string): Promise<Record<string, unknown>[]> {
  const { stdout } = await promisify(execFile)(LEGO, [
    "rollout", "--tasks", "easy:seed=5,count=1", "--harness", "reference", "--engine", "scripted-gold", "--group-size", String(G), "--concurrency", "2",
    "--max-sequence-tokens", String(LIMIT), "--over-length", policy, "--trainer", trainer, "--spool-dir", join(work, `tx-${policy}`), "--producer-id", `ol-${policy}`,
  ], { timeout: 420_000, maxBuffer: 1 << 24 });
  return stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
}

interface Shape { id: string; longest: number; consistent: boolean; trainable: number; reward: number | null; over_length: { action: string; tokens: number; limit: number } | null }

/** Per received trajectory: the longest segment, whether every per-token column has its length, and the record's verdict. */
function segmentShapes(spool: string): Shape[] {
  const script = `
import json, sys, pathlib, pyarrow as pa
from lego_rl.transport.spool_file import read_spool_file
for f in sorted(pathlib.Path(sys.argv[1], "batches").glob("*.lgrb")):
    for r in pa.ipc.open_stream(read_spool_file(f).payload).read_all().to_pylist():
        segs = r["segments"]
        ok = all(len(s["logprobs"]) == len(s["loss_mask"]) == len(s["provenance"]) == len(s["token_ids"]) and all(t["completion_end"] <= len(s["token_ids"]) for t in s["turns"]) for s in segs)
        print(json.dumps({"id": r["trajectory_id"], "longest": max((len(s["token_ids"]) for s in segs), default=0), "consistent": ok, "trainable": sum(sum(s["loss_mask"]) for s in segs), "reward": r["reward"], "over_length": r["over_length"]}))
`;
  const r = spawnSync(PYTHON, ["-c", script, spool], { encoding: "utf8", timeout: 60_000 });
  if (r.status !== 0) throw new Error(`reading the receiver spool failed: ${r.stderr}`);
  return r.stdout.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as Shape);
}

describe("lego rollout over-length policy, JSON-lines log and summary", () => {
  const rx = receiverFixture(work);

  it("truncate ships every trajectory cut to the bound; drop ships each without segments or reward and says why; both are counted", { timeout: 900_000 }, async () => {
    const cut = await rollout("truncate", rx.address);
    // Not a terminal: every line is one JSON event, the last one the summary.
    expect(cut.every((l) => typeof l.event === "string")).toBe(true);
    const kinds = new Set(cut.map((l) => l.event));
    for (const k of ["rollout_started", "rollout_finished", "over_length", "group_shipped", "summary"]) expect(kinds.has(k)).toBe(true);
    const truncated = cut.filter((l) => l.event === "over_length");
    expect(truncated).toHaveLength(G);
    for (const e of truncated) {
      expect(e).toMatchObject({ action: "truncated", limit: LIMIT });
      expect(e.tokens as number).toBeGreaterThan(LIMIT);
      expect(e.reason).toMatch(new RegExp(`cut to the trainer's ${LIMIT} tokens`));
    }
    const s1 = cut.at(-1)!;
    expect(s1).toMatchObject({
      event: "summary", groupsShipped: 1, trajectoriesShipped: G, overLength: { dropped: 0, truncated: G }, failures: {},
      rewardByHarness: { "reference/scripted-gold": 1 }, config: { maxSequenceTokens: LIMIT, overLength: "truncate", harness: "reference" },
    });
    const tp = s1.throughput as { rolloutsPerMin: number; trajectoriesPerMin: number };
    expect(tp.rolloutsPerMin).toBeGreaterThan(0);
    const stage = s1.stageS as { setup: number; agent: number; grading: number };
    for (const v of Object.values(stage)) expect(v).toBeGreaterThan(0);
    const tokens = s1.tokens as { prompt: number; completion: number; trainable: number };
    expect(tokens.prompt + tokens.completion).toBeGreaterThan(G * LIMIT); // as recorded, before the cut
    expect(s1).toMatchObject({ toolCallParseFailures: 0 });
    const shapes = segmentShapes(rx.rxSpool);
    expect(shapes).toHaveLength(G);
    for (const sh of shapes) {
      expect(sh.longest).toBe(LIMIT);
      expect(sh.consistent).toBe(true);
      expect(sh.reward).toBe(1);
      expect(sh.over_length).toMatchObject({ action: "truncated", limit: LIMIT });
      expect(sh.over_length!.tokens).toBeGreaterThan(LIMIT);
    }

    const dropped = await rollout("drop", rx.address);
    const s2 = dropped.at(-1)!;
    expect(s2).toMatchObject({ event: "summary", groupsShipped: 1, trajectoriesShipped: G, overLength: { dropped: G, truncated: 0 }, failures: { over_length: G }, statuses: { ok: G } });
    const drops = dropped.filter((l) => l.event === "over_length");
    expect(drops).toHaveLength(G);
    for (const e of drops) expect(e.reason).toMatch(new RegExp(`longer than the trainer's ${LIMIT} tokens: dropped`));
    expect(dropped.find((l) => l.event === "group_shipped")).toMatchObject({ trajectories: G, droppedOverLength: G, droppedEnvErrors: 0 });
    // The dropped run's records reached the trainer accounted for, with nothing it could train on.
    const all = segmentShapes(rx.rxSpool);
    expect(all).toHaveLength(2 * G);
    const gone = all.filter((sh) => sh.over_length?.action === "dropped");
    expect(gone).toHaveLength(G);
    for (const sh of gone) {
      expect(sh).toMatchObject({ longest: 0, trainable: 0, reward: null, over_length: { limit: LIMIT } });
      expect(sh.over_length!.tokens).toBeGreaterThan(LIMIT);
    }
  });
});
