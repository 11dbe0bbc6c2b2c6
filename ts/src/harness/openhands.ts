/**
 * OpenHands SDK (PyPI openhands-sdk + openhands-tools), unmodified, on the
 * mounted Python runtime. The SDK has no CLI: openhands/driver.py builds its
 * Agent with the SDK's own terminal and file-editor tools and runs one local
 * Conversation, the LLM an OpenAI-compatible `openai/<model>` at the session.
 */
import { readFileSync } from "node:fs";
import type { AgentProgram, TaskDefinition } from "../sandbox/index.ts";
import { RUNTIMES_DIR } from "./claude-code.ts";
import { PYTHON_BIN, pythonEnv, pythonRuntimes } from "./python-runtime.ts";
import type { Harness, HarnessLimits, HarnessSession } from "./types.ts";

/** Pinned in scripts/sandbox/python-locks/openhands.in. */
export const OPENHANDS_SDK_VERSION = "1.58.2";
const DRIVER = readFileSync(new URL("./openhands/driver.py", import.meta.url));
const DIR = "opt/lego-harness";

export function openHandsHarness(runtimesDir = RUNTIMES_DIR): Harness {
  return {
    name: "openhands",
    version: OPENHANDS_SDK_VERSION,
    runtimes: () => pythonRuntimes(runtimesDir, "openhands"),
    program(def: TaskDefinition, session: HarnessSession, limits: HarnessLimits): AgentProgram {
      const file = (path: string, content: string | Buffer) => ({ path: `${DIR}/${path}`, content: Buffer.from(content), mode: 0o444 });
      return {
        script: [
          `exec ${PYTHON_BIN} /${DIR}/driver.py`,
          `--base-url '${session.baseUrl}/v1'`,
          `--secret-file /${DIR}/secret`,
          `--model '${session.model}'`,
          `--instruction-file /${DIR}/instruction.md`,
          "--events /tmp/lego-openhands-events.jsonl",
          `--max-turns ${limits.maxTurns}`,
        ].join(" "),
        env: { ...pythonEnv("openhands"), OPENHANDS_SUPPRESS_BANNER: "1" },
        files: [file("driver.py", DRIVER), file("secret", session.secret), file("instruction.md", def.instruction)],
      };
    },
  };
}
