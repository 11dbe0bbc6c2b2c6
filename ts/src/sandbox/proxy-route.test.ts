import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createServer, type Server } from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CLAUDE_CODE_VERSION, CODEX_VERSION, OPENCODE_VERSION, RUNTIMES_DIR } from "../harness/index.ts";
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
  // More than --version: each binary the adapters run is the pinned one, its headless mode still takes
  // the flags the adapter passes (a new version dropping or renaming one fails here, not in a rollout),
  // the ripgrep OpenCode needs is there, and the mount is read-only to the agent user.
  it("runs Claude Code, OpenCode and Codex CLI from mounted runtimes, offline, as the agent user: pinned versions, their headless flags, read-only", async () => {
    const runner = await RolloutRunner.create({
      maxAttempts: 1,
      runtimes: ["node", "harness"].map((name) => ({ name, hostPath: join(RUNTIMES_DIR, name) })),
    });
    const nm = "/opt/lego-runtimes/harness/node_modules";
    const claude = `${nm}/@anthropic-ai/claude-code-linux-x64/claude`;
    const opencode = `${nm}/opencode-linux-x64/bin/opencode`;
    const codex = `${nm}/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex`;
    // Each failed check names itself on stderr (the outcome's log).
    const has = (help: string, flags: string[]) => flags.map((f) => `${help} 2>&1 | grep -q -- '${f}' || fail "${help} lists no ${f}"`);
    const o = await runner.run({
      ...fixAdd,
      rolloutId: "harness-runtimes",
      agentTimeoutSec: 240, // eight starts of three large binaries, on a loaded host
      agent: {
        script: [
          'fail() { echo "runtime check failed: $1" >&2; exit 1; }',
          'test "$(id -u)" != 0 || fail "runs as root"',
          "export PATH=/opt/lego-runtimes/node/bin:$PATH",
          `${nm}/.bin/claude --version | grep -q 'Claude Code' || fail "node_modules/.bin/claude is not Claude Code"`,
          `test "$(${claude} --version)" = '${CLAUDE_CODE_VERSION} (Claude Code)' || fail "claude is not ${CLAUDE_CODE_VERSION}"`,
          // --max-turns is not in its --help: its parser must take every flag the adapter passes and stop only at the unknown last one.
          `test "$(${claude} -p --bare --output-format stream-json --verbose --tools Bash --max-turns 1 --model policy --dangerously-skip-permissions --lego-unknown 2>&1)" = "error: unknown option '--lego-unknown'" || fail "claude refuses a flag the adapter passes"`,
          `test "$(${opencode} --version)" = '${OPENCODE_VERSION}' || fail "opencode is not ${OPENCODE_VERSION}"`,
          ...has(`${opencode} run --help`, ["--pure", "--format", "--dir", "--model"]),
          `test "$(${codex} --version)" = 'codex-cli ${CODEX_VERSION}' || fail "codex is not ${CODEX_VERSION}"`,
          ...has(`${codex} exec --help`, ["--json", "--ephemeral", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--cd"]),
          '/opt/lego-runtimes/harness/bin/rg --version | grep -q ripgrep || fail "no ripgrep in harness/bin"',
          `if touch ${nm}/lego-write-probe 2>/dev/null; then fail "the runtime is writable"; fi`,
        ].join("\n"),
      },
    });
    await runner.close();
    expect(o, o.log).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
  }, 360_000);
});
