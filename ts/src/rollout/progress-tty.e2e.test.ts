/**
 * `lego rollout` on a real terminal: run under util-linux `script`, which
 * gives it a pseudo-terminal for stdout and stderr, it draws the progress
 * bars (groups and rollouts done, in flight, reward so far, failures) and
 * the summary table instead of JSON-lines events. Oracle rollouts on real
 * sandboxes into the real receiver.
 */
import { execFile } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { receiverFixture } from "./test-support.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const work = mkdtempSync(join(tmpdir(), "lego-rollout-tty-"));
const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

describe("lego rollout on a terminal", () => {
  const rx = receiverFixture(work);

  it("draws progress bars and the summary table, not JSON events", { timeout: 400_000 }, async () => {
    const args = ["rollout", "--tasks", "easy:seed=3,count=2", "--harness", "oracle", "--group-size", "2", "--concurrency", "2", "--trainer", rx.address,
      "--spool-dir", join(work, "tx"), "--producer-id", "tty"];
    // -e: script exits with the command's status; stty gives the terminal a width (a fresh pty has none).
    const { stdout } = await promisify(execFile)("script", ["-qefc", `stty cols 200 rows 40; ${[LEGO, ...args].map(quote).join(" ")}`, "/dev/null"], { timeout: 360_000, maxBuffer: 1 << 24 });
    const last = stdout.slice(stdout.lastIndexOf("groups  "));
    expect(last).toMatch(/groups\s+\[[^\]]*\] 2\/2 \| reward so far 1\.000/);
    expect(last).toMatch(/rollouts \[[^\]]*\] 4\/4 \| in flight 0 \| failures: none/);
    expect(stdout).toContain("reward by task and harness:");
    expect(stdout).toMatch(/2 groups, 4 trajectories shipped/);
    expect(stdout).toMatch(/throughput: [\d.]+ rollouts\/min/);
    // The per-event JSON lines are for logs, not terminals; the summary line still closes stdout.
    expect(stdout).not.toContain('{"event":"rollout_started"');
    expect(stdout).toContain('{"event":"summary"');
  });
});
