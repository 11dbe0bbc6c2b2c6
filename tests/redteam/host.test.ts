/**
 * Attacks on what the host itself reads and copies: the detector files it
 * reads through /proc/PID/root, Harbor's reward file, the copy into grading,
 * and links that resolve out of the workspace only through other links.
 * Without their defenses the first two hang the rollout worker for ever (a
 * FIFO) or flood it (a link to the host's /dev/zero), and the third is a
 * retried env_error.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_LIMITS } from "../../ts/src/sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, appendToCode, closeAll, expectDefended, fixtureImages, openRedTeam, type RedTeam } from "./support.ts";

beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

/** A FIFO (a read blocks for ever) or a link to /dev/zero (resolved against the host's root when read through /proc/PID/root). */
const TRAPS = {
  fifo: (path: string) => `mkfifo ${path}`,
  "link to /dev/zero": (path: string) => `ln -s /dev/zero ${path}`,
} as const;
const TRAP_NAMES = Object.keys(TRAPS) as Array<keyof typeof TRAPS>;

describe("attacks on the host's reads and copies", () => {
  let rt: RedTeam;
  /** A 64 MiB quota (16k inodes) with the default copy-out limit: the inodes run out before the tar cap. */
  let smallDisk: RedTeam;
  beforeAll(async () => {
    rt = await openRedTeam();
    smallDisk = await openRedTeam({ limits: { ...DEFAULT_LIMITS, diskBytes: 64 << 20 } });
  });
  afterAll(() => closeAll(rt, smallDisk));

  it.each(TRAP_NAMES)("a %s in place of the git probe log neither hangs nor floods the host, and counts as a probe", async (trap) => {
    const o = await rt.attack("fix-add", `probe-log-${trap.split(" ")[0]}`,
      `rm -rf /tmp/.lego-audit && mkdir /tmp/.lego-audit && ${TRAPS[trap]("/tmp/.lego-audit/git-probes.log")}`);
    expectDefended(o, "ok", ["git_history_probe"]);
  });

  it.each(TRAP_NAMES)("a %s in place of the reward file at grading is not read (and no exec is left to hang on it)", async (trap) => {
    // slugify's test.sh never writes the reward file itself (fix-add's would block on the FIFO).
    const make = TRAPS[trap]("/logs/verifier/reward.txt");
    const o = await rt.attack("slugify", `reward-file-${trap.split(" ")[0]}`,
      appendToCode("slugify", `import subprocess\nsubprocess.run(${JSON.stringify(`mkdir -p /logs/verifier; rm -f /logs/verifier/reward.txt; ${make}`)}, shell=True)`));
    expectDefended(o, "ok", []);
    expect(o.log).toMatch(/\d+ failed/);
  });

  it("files that use the agent stage's disk to the last inodes, so that the copy into grading runs out, are resource_limit, not an env_error", async () => {
    const fill = [
      "rm -rf .git", // the agent stage's own repository costs inodes grading does not need
      "python3 - <<'PY'",
      "import os",
      "os.makedirs('/workspace/fill')",
      "n = 0",
      "try:",
      "    while True:",
      "        open(f'/workspace/fill/{n}', 'w').close()",
      "        n += 1",
      "except OSError:",
      "    pass",
      "for i in range(1, 4):", // a few free inodes: the agent stage does not look full
      "    os.unlink(f'/workspace/fill/{n - i}')",
      "PY",
    ].join("\n");
    const o = await smallDisk.attack("slugify", "inodes", fill);
    expectDefended(o, "agent_error", ["resource_limit"]);
    expect(o.log).toContain("disk_quota");
  });

  it("a link that leaves the workspace only through another link is dropped and flagged", async () => {
    // a/b/l2 normalises to a/etc, but a/b/l1 is the workspace root, so it resolves to /etc.
    const o = await rt.attack("fix-add", "link-chain", "mkdir -p a/b && ln -s ../.. a/b/l1 && ln -s l1/../../etc a/b/l2 && test -e a/b/l2/passwd");
    expectDefended(o, "ok", ["write_outside_workspace"]);
  });
});
