/**
 * The reference harness: our own small agent (reference/agent.py, stdlib
 * Python, so it runs on what the base image has). The files go in root-owned
 * under /opt/lego-harness; the agent user can read them, not change them.
 */
import { readFileSync } from "node:fs";
import type { AgentProgram, TaskDefinition } from "../sandbox/index.ts";
import { HARNESS_FILES_DIR, type Harness, type HarnessLimits, type HarnessSession } from "./types.ts";

const AGENT_SOURCE = readFileSync(new URL("./reference/agent.py", import.meta.url));
const DIR = HARNESS_FILES_DIR;

export const referenceHarness: Harness = {
  name: "reference",
  version: "1",
  runtimes: () => [],
  program(def: TaskDefinition, session: HarnessSession, limits: HarnessLimits): AgentProgram {
    const file = (path: string, content: string | Buffer, mode = 0o444) => ({ path: `${DIR}/${path}`, content: Buffer.from(content), mode });
    return {
      script: [
        `exec python3 /${DIR}/agent.py`,
        `--base-url '${session.baseUrl}/v1'`,
        `--secret-file /${DIR}/secret`,
        `--model '${session.model}'`,
        `--instruction-file /${DIR}/instruction.md`,
        `--trajectory /tmp/lego-trajectory.jsonl`,
        `--max-turns ${limits.maxTurns}`,
      ].join(" "),
      files: [file("agent.py", AGENT_SOURCE), file("secret", session.secret), file("instruction.md", def.instruction)],
    };
  },
};
