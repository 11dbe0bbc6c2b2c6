/**
 * `lego check` preflight: each check says what is wrong and the fix. Built so far: Docker
 * daemon, harness runtimes, disk space, ports, and with a model directory the tokenizer
 * against the model's vocabulary and the chat template against the tool-call parser
 * (model-checks.ts), and with an engine whether it returns MoE routing for routing replay
 * (routing-check.ts), whether the trainer's receiver answers a hello (trainer-check.ts), and with
 * --config a training job file: shapes, placement, memory per GPU, engines (job-check.ts).
 */
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, statfsSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import Docker from "dockerode";
import type { ToolCallFormat } from "../proxy/index.ts";
import { checkJobFile } from "./job-check.ts";
import { modelChecks } from "./model-checks.ts";
import { checkRouting, type RoutingEngine } from "./routing-check.ts";
import { checkTrainer } from "./trainer-check.ts";

export interface PreflightConfig {
  dockerSocket: string;
  runtimesDir: string;
  workDir: string;
  minFreeGiB: number;
  ports: number[];
  /** Model directory (config.json + tokenizer files); null skips the tokenizer and template checks. */
  modelDir: string | null;
  toolCallFormat: ToolCallFormat;
  /** Engine to probe for routing replay support; null skips that check. */
  engine: RoutingEngine | null;
  /** How long the engine probe may take (engine start-up included). */
  engineTimeoutMs: number;
  /** The trainer's data-plane receiver (`--receive` address); null skips that check. */
  trainerAddress: string | null;
  /** A training job file (`--config`, as the trainer entry points take); null skips the job checks. */
  jobConfig: string | null;
}

export interface CheckResult {
  name: string;
  ok: boolean;
  detail: string;
  /** Not run (ok stays true): what it would need. */
  skipped?: boolean;
  /** What to do when the check fails. */
  fix?: string;
}

export async function checkDocker(socketPath: string): Promise<CheckResult> {
  try {
    await new Docker({ socketPath, timeout: 5_000 }).ping();
    return { name: "docker", ok: true, detail: `daemon answers on ${socketPath}` };
  } catch (e) {
    return { name: "docker", ok: false, detail: `no Docker daemon on ${socketPath}: ${(e as Error).message}`,
      fix: "start the daemon (e.g. `sudo systemctl start docker`) or point --docker-socket at its socket" };
  }
}

export function checkRuntimes(dir: string): CheckResult {
  const manifest = join(dir, "manifest.json");
  const fix = "run `scripts/setup`, which installs the harness runtimes into this folder";
  if (!existsSync(manifest)) return { name: "runtimes", ok: false, detail: `no harness runtimes: ${manifest} is missing`, fix };
  let versions: Record<string, string>;
  try {
    versions = JSON.parse(readFileSync(manifest, "utf8")) as Record<string, string>;
  } catch (e) {
    return { name: "runtimes", ok: false, detail: `${manifest} is not JSON: ${(e as Error).message}`, fix };
  }
  const node = join(dir, "node", "bin", "node");
  const run = spawnSync(node, ["--version"], { encoding: "utf8", timeout: 10_000 });
  if (run.status !== 0) return { name: "runtimes", ok: false, detail: `${node} does not run: ${run.error?.message ?? run.stderr}`, fix };
  return { name: "runtimes", ok: true, detail: `${Object.keys(versions).length} entries, node ${run.stdout.trim()}` };
}

export function checkDisk(dir: string, minFreeGiB: number): CheckResult {
  const s = statfsSync(dir);
  const free = (s.bavail * s.bsize) / 2 ** 30;
  return free >= minFreeGiB
    ? { name: "disk", ok: true, detail: `${free.toFixed(1)} GiB free under ${dir}` }
    : { name: "disk", ok: false, detail: `${free.toFixed(1)} GiB free under ${dir}, need ${minFreeGiB}`, fix: "free space (old images: `docker image prune`) or choose another --work-dir" };
}

export function checkPort(port: number): Promise<CheckResult> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", (e) => resolve({ name: `port ${port}`, ok: false, detail: `port ${port} is taken: ${e.message}`, fix: `stop what listens on ${port} or configure another port` }));
    srv.listen(port, "127.0.0.1", () => srv.close(() => resolve({ name: `port ${port}`, ok: true, detail: "free" })));
  });
}

export async function preflight(c: PreflightConfig): Promise<CheckResult[]> {
  return [await checkDocker(c.dockerSocket), checkRuntimes(c.runtimesDir), checkDisk(c.workDir, c.minFreeGiB),
    ...(await Promise.all(c.ports.map(checkPort))),
    ...(c.modelDir !== null ? modelChecks(c.modelDir, c.toolCallFormat)
      : [{ name: "model", ok: true, skipped: true, detail: "no --model-dir: tokenizer and chat template checks not run" }]),
    c.engine !== null ? await checkRouting(c.engine, c.modelDir, c.engineTimeoutMs)
      : { name: "routing", ok: true, skipped: true, detail: "no --engine-address / --engine-url: routing replay support not probed" },
    c.trainerAddress !== null ? await checkTrainer(c.trainerAddress, c.engineTimeoutMs)
      : { name: "trainer", ok: true, skipped: true, detail: "no --trainer-address: trainer not probed" },
    ...(c.jobConfig !== null ? checkJobFile(c.jobConfig, Math.max(c.engineTimeoutMs, 180_000))
      : [{ name: "job", ok: true, skipped: true, detail: "no --config: training job not checked" }])];
}
