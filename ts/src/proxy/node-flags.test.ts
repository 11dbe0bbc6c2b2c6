import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { PROXY_NODE_FLAGS } from "./node-flags.ts";

const LEGO = fileURLToPath(new URL("../../bin/lego", import.meta.url));

describe("the V8 flags of processes that host the proxy", () => {
  it("are the ones the lego launcher sets", () => {
    const launcher = readFileSync(LEGO, "utf8");
    for (const flag of PROXY_NODE_FLAGS) expect(launcher).toContain(flag);
  });

  it("go on node's command line, except a flag the caller's NODE_OPTIONS set", () => {
    const command = (env: Record<string, string>) =>
      execFileSync(LEGO, ["--print-command", "rollout", "--help"], { env: { PATH: process.env["PATH"] ?? "", ...env } }).toString().trim();
    const own = command({});
    expect(own.startsWith(`node ${PROXY_NODE_FLAGS.join(" ")} --import `)).toBe(true);
    expect(own.endsWith("src/cli/main.ts rollout --help")).toBe(true);
    const theirs = command({ NODE_OPTIONS: "--max-semi-space-size=8" });
    expect(theirs).not.toContain("--max-semi-space-size=16");
    expect(theirs).toContain("--initial-old-space-size=256");
  });
});
