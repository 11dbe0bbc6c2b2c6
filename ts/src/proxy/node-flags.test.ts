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

  it("reach node through NODE_OPTIONS, with the caller's own options kept after them", () => {
    // The launcher's exports, evaluated by bash without starting node.
    const script = readFileSync(LEGO, "utf8").split("\n").filter((l) => l.startsWith("export NODE_OPTIONS")).join("\n");
    const run = (env: Record<string, string>) =>
      execFileSync("bash", ["-c", `${script}\nprintf %s "$NODE_OPTIONS"`], { env: { PATH: process.env["PATH"] ?? "", ...env } }).toString();
    expect(run({})).toBe(PROXY_NODE_FLAGS.join(" "));
    expect(run({ NODE_OPTIONS: "--max-semi-space-size=8" })).toBe(`${PROXY_NODE_FLAGS.join(" ")} --max-semi-space-size=8`);
  });
});
