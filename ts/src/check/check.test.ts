/** `lego check` against the real Docker daemon, the real runtimes cache, a dead socket and an empty runtimes dir. */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const lego = (...args: string[]) => spawnSync(LEGO, ["check", "--min-free-gib", "0.1", ...args], { encoding: "utf8", timeout: 50_000 });

describe("lego check", () => {
  it("passes on the default configuration", { timeout: 60_000 }, () => {
    const r = lego();
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/ok {3}docker/);
    expect(r.stdout).toMatch(/ok {3}runtimes/);
    expect(r.stdout).toContain("skip model: no --model-dir");
  });

  it("fails naming the fix when Docker is down (dead socket)", { timeout: 60_000 }, () => {
    const dir = mkdtempSync(join(tmpdir(), "check-"));
    try {
      const r = lego("--docker-socket", join(dir, "dead.sock"));
      expect(r.status).toBe(1);
      expect(r.stdout).toContain("FAIL docker");
      expect(r.stdout).toContain("fix: start the daemon");
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });

  it("fails naming the fix when the harness runtimes are missing (empty dir)", { timeout: 60_000 }, () => {
    const dir = mkdtempSync(join(tmpdir(), "check-"));
    try {
      const r = lego("--runtimes-dir", dir);
      expect(r.status).toBe(1);
      expect(r.stdout).toContain("FAIL runtimes");
      expect(r.stdout).toContain("fix: run `scripts/setup`");
    } finally { rmSync(dir, { recursive: true, force: true }); }
  });
});
