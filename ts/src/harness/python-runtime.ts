/**
 * The mounted CPython 3.12.1 runtime the Python harnesses run on
 * (scripts/sandbox/build-python-runtimes.sh): the interpreter at
 * /opt/lego-runtimes/python, each harness's packages in a folder of its own
 * (/opt/lego-runtimes/NAME, on PYTHONPATH), so their dependency pins never meet.
 */
import { join } from "node:path";
import type { RuntimeMount } from "../sandbox/index.ts";

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
