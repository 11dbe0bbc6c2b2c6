import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createServer, type Server } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RUNTIMES_DIR } from "../harness/index.ts";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImage, fixtureImages, leftoverContainers } from "./test-support.ts";
import type { TaskDefinition } from "./task.ts";


// Image builds (first run on a machine only) get their own long hook timeout.
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("agent stage: proxy route and mounted runtimes", () => {
  let server: Server;
  let dir: string;
  const seen: string[] = [];
  let fixAdd: { task: TaskDefinition; image: string };

  beforeAll(async () => {
    fixAdd = await fixtureImage("fix-add").then((f) => ({ task: f.task, image: f.image.tag }));
    // Stands in for the LLM proxy's per-session Unix socket.
    dir = mkdtempSync(join(tmpdir(), "lego-proxy-test-"));
    server = createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ model: "tiny", ok: true }));
    });
    await new Promise<void>((r) => server.listen(join(dir, "session.sock"), r));
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
    rmSync(dir, { recursive: true, force: true });
    expect(await leftoverContainers()).toEqual([]);
  });

  it("reaches its proxy session over http://127.0.0.1 through the forwarder, and nothing is flagged", async () => {
    const runner = await RolloutRunner.create({ maxAttempts: 1 });
    const client = [
      "import json, os, sys, urllib.request",
      "body = urllib.request.urlopen(os.environ['LEGO_PROXY_URL'] + '/v1/models', timeout=10).read()",
      "sys.exit(0 if json.loads(body) == {'model': 'tiny', 'ok': True} else 1)",
    ].join("\n");
    const o = await runner.run({
      ...fixAdd,
      rolloutId: "proxy",
      proxySocket: join(dir, "session.sock"),
      agent: { script: `python3 - <<'PY'\n${client}\nPY` },
    });
    await runner.close();
    expect(seen).toEqual(["GET /v1/models"]);
    expect(o).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
  });

  it("runs a harness runtime bind-mounted read-only (the host's node), not installed in the image", async () => {
    const runner = await RolloutRunner.create({ maxAttempts: 1, runtimes: [{ name: "node", hostPath: process.execPath }] });
    const o = await runner.run({
      ...fixAdd,
      rolloutId: "runtime",
      agent: {
        script: [
          "set -e",
          `test "$(/opt/lego-runtimes/node --version)" = "${process.version}"`,
          // `set -e` ignores a command inverted with `!`, so each check exits on its own.
          "if command -v node; then exit 8; fi", // the image itself has no node
          "if cp /dev/null /opt/lego-runtimes/node 2>/dev/null; then exit 9; fi", // read-only
        ].join("\n"),
      },
    });
    await runner.close();
    expect(o).toMatchObject({ status: "ok", reward: 0 });
  });

  // scripts/setup builds these runtimes (scripts/sandbox/build-runtimes.sh) before any test runs.
  it("runs Claude Code and OpenCode from mounted runtimes, offline", async () => {
    const runner = await RolloutRunner.create({
      maxAttempts: 1,
      runtimes: ["node", "harness"].map((name) => ({ name, hostPath: join(RUNTIMES_DIR, name) })),
    });
    const o = await runner.run({
      ...fixAdd,
      rolloutId: "harness-runtimes",
      agentTimeoutSec: 120,
      agent: {
        script: [
          "set -e",
          "export PATH=/opt/lego-runtimes/node/bin:$PATH",
          "/opt/lego-runtimes/harness/node_modules/.bin/claude --version | grep -q 'Claude Code'",
          "/opt/lego-runtimes/harness/node_modules/.bin/opencode --version",
        ].join("\n"),
      },
    });
    await runner.close();
    expect(o).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
  }, 180_000);
});
