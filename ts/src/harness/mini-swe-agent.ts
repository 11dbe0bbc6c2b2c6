/**
 * mini-swe-agent (PyPI mini-swe-agent), unmodified, on the mounted Python
 * runtime: bash only, through its one `bash` tool. mini-swe-agent/driver.py
 * runs its DefaultAgent with its own mini.yaml, the model an OpenAI-compatible
 * litellm `openai/<model>` at the session.
 */
import { readFileSync } from "node:fs";
import type { AgentProgram, TaskDefinition } from "../sandbox/index.ts";
import { RUNTIMES_DIR } from "./claude-code.ts";
import { PYTHON_BIN, pythonEnv, pythonRuntimes } from "./python-runtime.ts";
import type { Harness, HarnessLimits, HarnessSession } from "./types.ts";

/** Pinned in scripts/sandbox/python-locks/mini-swe-agent.in. */
export const MINI_SWE_AGENT_VERSION = "2.4.6";
const DRIVER = readFileSync(new URL("./mini-swe-agent/driver.py", import.meta.url));
const DIR = "opt/lego-harness";

export function miniSweAgentHarness(runtimesDir = RUNTIMES_DIR): Harness {
  return {
    name: "mini-swe-agent",
    version: MINI_SWE_AGENT_VERSION,
    runtimes: () => pythonRuntimes(runtimesDir, "mini-swe-agent"),
    program(def: TaskDefinition, session: HarnessSession, limits: HarnessLimits): AgentProgram {
      const file = (path: string, content: string | Buffer) => ({ path: `${DIR}/${path}`, content: Buffer.from(content), mode: 0o444 });
      return {
        script: [
          `exec ${PYTHON_BIN} /${DIR}/driver.py`,
          `--base-url '${session.baseUrl}/v1'`,
          `--secret-file /${DIR}/secret`,
          `--model '${session.model}'`,
          `--instruction-file /${DIR}/instruction.md`,
          "--trajectory /tmp/lego-mini-swe-agent.traj.json",
          `--max-turns ${limits.maxTurns}`,
        ].join(" "),
        env: {
          ...pythonEnv("mini-swe-agent"),
          MSWEA_GLOBAL_CONFIG_DIR: "/tmp/mini-swe-agent", // it creates its config folder at import
          MSWEA_SILENT_STARTUP: "1",
          MSWEA_COST_TRACKING: "ignore_errors",
        },
        files: [file("driver.py", DRIVER), file("secret", session.secret), file("instruction.md", def.instruction)],
      };
    },
  };
}
