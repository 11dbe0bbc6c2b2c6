/** The run journal on a real directory: resume, finish, a foreign unfinished run refused, a torn last line. */
import { appendFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { JOURNAL_FILE, RunJournal, runFingerprint } from "./journal.ts";

const root = mkdtempSync(join(tmpdir(), "lego-rollout-journal-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const fp = runFingerprint({ producerId: "p", harness: "oracle", groupSize: 2, taskIds: ["a", "b", "c"] });

describe("run journal", () => {
  it("resumes an unfinished run with its id and shipped groups; a finished one starts a new run", async () => {
    const dir = join(root, "resume");
    const one = RunJournal.open(dir, fp, "p");
    expect(one.resumed).toBe(false);
    // A group is journaled at its first spooled batch, inside its ship().
    await one.ship(0, "g0", 2, async () => one.onSpooled("b-1"));
    await one.ship(2, "g2", 0, async () => undefined); // nothing graded: journaled when send returns
    one.onSpooled("b-old"); // a resent batch of an older spool belongs to no group
    const two = RunJournal.open(dir, fp, "p");
    expect(two).toMatchObject({ runId: one.runId, resumed: true, shippedBefore: 2 });
    expect([0, 1, 2].map((i) => two.isShipped(i))).toEqual([true, false, true]);
    two.finish();
    const three = RunJournal.open(dir, fp, "p");
    expect(three.resumed).toBe(false);
    expect(three.runId).not.toBe(one.runId);
    expect(three.shippedBefore).toBe(0);
  });

  it("serializes shipping so each spooled batch is journaled under its own group", async () => {
    const dir = join(root, "serial");
    const j = RunJournal.open(dir, fp, "p");
    let release!: () => void;
    const first = j.ship(0, "g0", 1, () => new Promise<void>((r) => (release = r)).then(() => j.onSpooled("b0")));
    const second = j.ship(1, "g1", 1, async () => j.onSpooled("b1"));
    await new Promise((r) => setImmediate(r));
    expect(j.isShipped(1)).toBe(false); // waits behind g0
    release();
    await Promise.all([first, second]);
    const lines = readFileSync(join(dir, JOURNAL_FILE), "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(lines.slice(1)).toEqual([
      { shipped: 0, group: "g0", batches: ["b0"], trajectories: 1 },
      { shipped: 1, group: "g1", batches: ["b1"], trajectories: 1 },
    ]);
  });

  it("refuses an unfinished run of another fingerprint, naming the file; ignores a torn last line", () => {
    const dir = join(root, "foreign");
    const j = RunJournal.open(dir, fp, "p");
    const other = runFingerprint({ producerId: "p", harness: "oracle", groupSize: 4, taskIds: ["a", "b", "c"] });
    expect(() => RunJournal.open(dir, other, "p")).toThrow(new RegExp(`${JOURNAL_FILE}: run ${j.runId} is unfinished`));
    appendFileSync(join(dir, JOURNAL_FILE), '{"shipped": 1, "gro');
    expect(RunJournal.open(dir, fp, "p")).toMatchObject({ runId: j.runId, shippedBefore: 0 });
    appendFileSync(join(dir, JOURNAL_FILE), '\n{"shipped": 1, "group": "g1", "batches": [], "trajectories": 0}\n');
    expect(() => RunJournal.open(dir, fp, "p")).toThrow(/line 2 is not JSON; the journal is damaged/);
  });
});
