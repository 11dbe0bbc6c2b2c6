/** Child processes of the benchmark (bench.ts): the Python receiver and comparison peers, as JSON-line streams. */
import { existsSync, readFileSync } from "node:fs";
import type { JsonLineProcess } from "../json-line-process.ts";
import { TransportTimeoutError } from "./errors.ts";

export { JsonLineProcess, PYTHON, type JsonEvent } from "../json-line-process.ts";

/** Waits for a peer to announce its port in `portFile` (written atomically by bench_peer.py). */
export async function readPort(peer: JsonLineProcess, portFile: string, timeoutMs = 30_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(portFile)) {
    if (Date.now() > deadline) throw new TransportTimeoutError(`${peer.name} did not announce its port in ${portFile}`);
    await new Promise((r) => setTimeout(r, 10)); // polling a file the peer writes once; no event to wait on
  }
  return Number(readFileSync(portFile, "utf8"));
}
