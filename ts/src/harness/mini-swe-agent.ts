/**
 * mini-swe-agent (PyPI mini-swe-agent), unmodified, on the mounted Python
 * runtime: bash only, through its one `bash` tool. mini-swe-agent/driver.py
 * runs its DefaultAgent with its own mini.yaml, the model an OpenAI-compatible
 * litellm `openai/<model>` at the session.
 */
import { readFileSync } from "node:fs";
import type { AgentProgram, TaskDefinition } from "../sandbox/index.ts";
import { RUNTIMES_DIR } from "./claude-code.ts";
import { pythonDriverProgram, pythonRuntimes } from "./python-runtime.ts";
import type { Harness, HarnessLimits, HarnessSession } from "./types.ts";

/** Pinned in scripts/sandbox/python-locks/mini-swe-agent.in. */
export const MINI_SWE_AGENT_VERSION = "2.4.6";
const DRIVER = readFileSync(new URL("./mini-swe-agent/driver.py", import.meta.url));

export function miniSweAgentHarness(runtimesDir = RUNTIMES_DIR): Harness {
  return {
    name: "mini-swe-agent",
    version: MINI_SWE_AGENT_VERSION,
    runtimes: () => pythonRuntimes(runtimesDir, "mini-swe-agent"),
    program(def: TaskDefinition, session: HarnessSession, limits: HarnessLimits): AgentProgram {
      return pythonDriverProgram("mini-swe-agent", DRIVER, def, session, limits, {
        args: ["--trajectory /tmp/lego-mini-swe-agent.traj.json"],
        env: {
          MSWEA_GLOBAL_CONFIG_DIR: "/tmp/mini-swe-agent", // it creates its config folder at import
          MSWEA_SILENT_STARTUP: "1",
          MSWEA_COST_TRACKING: "ignore_errors",
        },
      });
    },
  };
}
