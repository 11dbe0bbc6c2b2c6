/**
 * The mounted Python runtime set-up builds (build-python-runtimes.sh), seen
 * from inside a real agent container as the agent user, offline: the pinned
 * CPython with its extension modules, both harnesses importable at their
 * pinned versions from their own folders, the mounts read-only, and nothing
 * reaching for the network on import (litellm's cost map stays local).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RolloutRunner } from "../rollout/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImage, fixtureImages, leftoverContainers } from "../sandbox/test-support.ts";
import { MINI_SWE_AGENT_VERSION, OPENHANDS_SDK_VERSION, PYTHON_VERSION, RUNTIMES_DIR } from "./index.ts";
import { PYTHON_BIN, pythonEnv, pythonRuntimes } from "./python-runtime.ts";

beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);
afterAll(async () => expect(await leftoverContainers()).toEqual([]));

describe("the mounted Python harness runtime", () => {
  it(`runs CPython ${PYTHON_VERSION} with openhands-sdk ${OPENHANDS_SDK_VERSION} and mini-swe-agent ${MINI_SWE_AGENT_VERSION}, read-only, offline`, async () => {
    const fix = await fixtureImage("fix-add");
    const mounts = [...pythonRuntimes(RUNTIMES_DIR, "openhands"), ...pythonRuntimes(RUNTIMES_DIR, "mini-swe-agent").slice(1)];
    const runner = await RolloutRunner.create({ maxAttempts: 1, runtimes: mounts });
    const check = (packages: string, code: string) =>
      Object.entries(pythonEnv(packages)).map(([k, v]) => `${k}=${v}`).join(" ") + ` ${PYTHON_BIN} -c '${code}'`;
    const o = await runner.run({
      task: fix.task,
      image: fix.image.tag,
      rolloutId: "python-runtime",
      agentTimeoutSec: 120,
      agent: {
        script: [
          "set -e",
          "test \"$(id -u)\" != 0",
          check("openhands", `import platform, ssl, sqlite3, ctypes; assert platform.python_version() == "${PYTHON_VERSION}", platform.python_version()`),
          check("openhands", `import importlib.metadata as m, openhands.sdk, openhands.tools.terminal, openhands.tools.file_editor; assert m.version("openhands-sdk") == "${OPENHANDS_SDK_VERSION}"`),
          check("mini-swe-agent", `import importlib.metadata as m, litellm, minisweagent.agents.default; assert m.version("mini-swe-agent") == "${MINI_SWE_AGENT_VERSION}"`),
          // Each harness sees only its own packages. (`! cmd` would not stop a set -e script.)
          `if ${check("mini-swe-agent", "import openhands.sdk")} 2>/dev/null; then exit 9; fi`,
          "if touch /opt/lego-runtimes/python/x 2>/dev/null; then exit 9; fi",
          "if touch /opt/lego-runtimes/openhands/x 2>/dev/null; then exit 9; fi",
        ].join("\n"),
      },
    });
    await runner.close();
    expect(o).toMatchObject({ status: "ok", reward: 0, defenseFlags: [] });
  }, 180_000);
});
