/**
 * The mounted CPython 3.12.1 runtime the Python harnesses run on
 * (scripts/sandbox/build-python-runtimes.sh): the interpreter at
 * /opt/lego-runtimes/python, each harness's packages in a folder of its own
 * (/opt/lego-runtimes/NAME, on PYTHONPATH), so their dependency pins never meet.
 */
import { join } from "node:path";
import type { AgentProgram, RuntimeMount, TaskDefinition } from "../sandbox/index.ts";
import { HARNESS_FILES_DIR, type HarnessLimits, type HarnessSession } from "./types.ts";

const ROOT = "/opt/lego-runtimes";
export const PYTHON_BIN = `${ROOT}/python/bin/python3`;
export const PYTHON_VERSION = "3.12.1";

export function pythonRuntimes(runtimesDir: string, packages: string): RuntimeMount[] {
  return [
    { name: "python", hostPath: join(runtimesDir, "python") },
    { name: packages, hostPath: join(runtimesDir, packages) },
  ];
}

/** Environment for a driver run on the mounted runtime (the drivers drop LD_LIBRARY_PATH before any tool runs). */
export function pythonEnv(packages: string): Record<string, string> {
  return {
    // The prefix links libpython by its build-time path, which the container lacks.
    LD_LIBRARY_PATH: `${ROOT}/python/lib`,
    PYTHONPATH: `${ROOT}/${packages}`,
    PYTHONNOUSERSITE: "1",
    PYTHONDONTWRITEBYTECODE: "1", // the mount is read-only; byte-code was compiled at build time
    PYTHONUNBUFFERED: "1",
    // litellm fetches its model cost map from the network at import otherwise.
    LITELLM_LOCAL_MODEL_COST_MAP: "True",
  };
}

/** Where a Python harness's driver, secret and instruction are written in the agent container (read-only files). */
const DRIVER_DIR = HARNESS_FILES_DIR;

/**
 * The program of a Python harness: its driver on the mounted runtime, told the
 * session (URL, secret file, model), the instruction file and the turn limit,
 * plus what is the harness's own (`args`, `env`).
 */
export function pythonDriverProgram(
  packages: string, driver: Buffer, def: TaskDefinition, session: HarnessSession, limits: HarnessLimits,
  own: { args: string[]; env: Record<string, string> },
): AgentProgram {
  const file = (path: string, content: string | Buffer) => ({ path: `${DRIVER_DIR}/${path}`, content: Buffer.from(content), mode: 0o444 });
  return {
    script: [
      `exec ${PYTHON_BIN} /${DRIVER_DIR}/driver.py`,
      `--base-url '${session.baseUrl}/v1'`,
      `--secret-file /${DRIVER_DIR}/secret`,
      `--model '${session.model}'`,
      `--instruction-file /${DRIVER_DIR}/instruction.md`,
      ...own.args,
      `--max-turns ${limits.maxTurns}`,
    ].join(" "),
    env: { ...pythonEnv(packages), ...own.env },
    files: [file("driver.py", driver), file("secret", session.secret), file("instruction.md", def.instruction)],
  };
}
