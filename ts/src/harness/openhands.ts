/**
 * OpenHands SDK (PyPI openhands-sdk + openhands-tools), unmodified, on the
 * mounted Python runtime. The SDK has no CLI: openhands/driver.py builds its
 * Agent with the SDK's own terminal and file-editor tools and runs one local
 * Conversation, the LLM an OpenAI-compatible `openai/<model>` at the session.
 */
import { readFileSync } from "node:fs";
import type { AgentProgram, TaskDefinition } from "../sandbox/index.ts";
import { RUNTIMES_DIR } from "./claude-code.ts";
import { pythonDriverProgram, pythonRuntimes } from "./python-runtime.ts";
import type { Harness, HarnessLimits, HarnessSession } from "./types.ts";

/** Pinned in scripts/sandbox/python-locks/openhands.in. */
export const OPENHANDS_SDK_VERSION = "1.58.2";
const DRIVER = readFileSync(new URL("./openhands/driver.py", import.meta.url));

export function openHandsHarness(runtimesDir = RUNTIMES_DIR): Harness {
  return {
    name: "openhands",
    version: OPENHANDS_SDK_VERSION,
    runtimes: () => pythonRuntimes(runtimesDir, "openhands"),
    program(def: TaskDefinition, session: HarnessSession, limits: HarnessLimits): AgentProgram {
      return pythonDriverProgram("openhands", DRIVER, def, session, limits, {
        args: ["--events /tmp/lego-openhands-events.jsonl"],
        env: { OPENHANDS_SUPPRESS_BANNER: "1" },
      });
    },
  };
}
