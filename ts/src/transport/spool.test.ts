/**
 * The spool writes a framed batch either through a buffer (`append`) or straight
 * into the file's mapped pages (`appendInPlace`); both leave the same bytes on disk.
 */
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { decodeBatch, type RoutingShape } from "../schema/index.ts";
import { encodeTrajectoryBatch } from "./batcher.ts";
import { fileMappingUnavailable } from "./mapped-file.ts";
import { Spool } from "./spool.ts";
import { readSpoolFile } from "./spool-file.ts";
import { replicate, syntheticTrajectory } from "./workload.ts";

const routing: RoutingShape = { layers: 4, top_k: 2, num_experts: 8 };
const batch = (seq: number, rows = 3) =>
  encodeTrajectoryBatch(replicate(syntheticTrajectory("tpl", 500, routing), rows, `s${seq}`), routing, { batchId: `b-${seq}`, producerId: "w", seq });

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "lgt-spool-"));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe("Spool.appendInPlace", () => {
  it("is available wherever set-up found a C compiler, and says why not otherwise", () => {
    const { spawnSync } = require("node:child_process") as typeof import("node:child_process");
    const hasCompiler = spawnSync("sh", ["-c", "command -v cc"]).status === 0;
    if (hasCompiler) expect(fileMappingUnavailable).toBeNull(); // scripts/setup built ts/native/build/mapped-file.node
    else expect(fileMappingUnavailable).toMatch(/mapped-file\.node/);
  });

  it("leaves the bytes append would, and hands out a view of the file's payload", () => {
    const { header, payload } = batch(1);
    const written = new Spool(join(dir, "a")).append(header, payload);
    const spool = new Spool(join(dir, "b"));
    const placed = spool.appendInPlace(header, (target) => target.set(payload))!;
    expect(readFileSync(placed.entry.path).equals(readFileSync(written.path))).toBe(true);
    expect(Buffer.from(placed.payload).equals(Buffer.from(payload))).toBe(true);
    expect(decodeBatch(readSpoolFile(placed.entry.path).payload, "Trajectory").rows).toHaveLength(3);
    spool.close();
  });

  it("writes the next batch over an acked one's file, growing or shrinking it to fit", () => {
    const spool = new Spool(join(dir, "s"));
    const first = batch(1, 4);
    const a = spool.appendInPlace(first.header, (t) => t.set(first.payload))!;
    const inode = statSync(a.entry.path).ino;
    spool.remove(a.entry);
    expect(readdirSync(join(dir, "s")).filter((n) => n.endsWith(".lgrb"))).toEqual([]);
    for (const [seq, rows] of [[2, 2], [3, 5]] as const) {
      const next = batch(seq, rows);
      const b = spool.appendInPlace(next.header, (t) => t.set(next.payload))!;
      expect(statSync(b.entry.path).ino).toBe(inode);
      expect(readSpoolFile(b.entry.path).header).toEqual(next.header); // exact length: no stale tail
      expect(decodeBatch(readSpoolFile(b.entry.path).payload, "Trajectory").rows.map((r) => r.trajectory_id)[0]).toBe(`s${seq}-0`);
      spool.remove(b.entry);
    }
    spool.close();
  });

  it("returns null when mapping is switched off, and append still works", () => {
    const { header, payload } = batch(1);
    const spool = new Spool(join(dir, "off"), 8, false);
    expect(spool.appendInPlace(header, () => undefined)).toBeNull();
    expect(readSpoolFile(spool.append(header, payload).path).header).toEqual(header);
  });
});

describe("free files", () => {
  it("keep distinct names across spools of one directory in one process", () => {
    // A restarted Sender in the same process (same pid) reopens the spool: its acked
    // files must never be renamed onto a free file the other spool's slots still name.
    const first = new Spool(join(dir, "shared"));
    const second = new Spool(join(dir, "shared"));
    for (let seq = 1; seq <= 12; seq++) {
      const spool = seq % 2 ? first : second;
      const { header, payload } = batch(seq, 1 + (seq % 3));
      const placed = spool.appendInPlace(header, (t) => t.set(payload))!;
      expect(readSpoolFile(placed.entry.path).header).toEqual(header);
      expect(Buffer.from(readSpoolFile(placed.entry.path).payload).equals(Buffer.from(payload))).toBe(true);
      spool.remove(placed.entry);
    }
    const free = readdirSync(join(dir, "shared", "free"));
    expect(new Set(free).size).toBe(free.length);
    first.close();
    second.close();
  });
});

describe("a full file system", () => {
  // Root only (CI runs as root): it mounts a 1 MiB tmpfs to fill up.
  it.runIf(process.getuid?.() === 0)("refuses a batch with ENOSPC instead of crashing on a mapped page, and keeps working", () => {
    const { execFileSync } = require("node:child_process") as typeof import("node:child_process");
    const mount = join(dir, "tiny");
    require("node:fs").mkdirSync(mount);
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mount]);
    try {
      const spool = new Spool(join(mount, "spool"));
      const wide: RoutingShape = { layers: 48, top_k: 8, num_experts: 128 };
      const big = encodeTrajectoryBatch([syntheticTrajectory("big", 8_000, wide)], wide, { batchId: "b-big", producerId: "w", seq: 1 }); // ~3 MB
      expect(big.payload.length).toBeGreaterThan(1 << 20);
      expect(() => spool.appendInPlace(big.header, (t) => t.set(big.payload))).toThrow(/ENOSPC/);
      expect(readdirSync(join(mount, "spool")).filter((n) => n.endsWith(".lgrb"))).toEqual([]);
      const small = encodeTrajectoryBatch(replicate(syntheticTrajectory("tpl", 20, routing), 1, "small"), routing, { batchId: "b-small", producerId: "w", seq: 2 });
      const placed = spool.appendInPlace(small.header, (t) => t.set(small.payload))!;
      expect(readSpoolFile(placed.entry.path).header).toEqual(small.header);
      spool.close();
    } finally {
      execFileSync("umount", ["-l", mount]);
    }
  });
});
