/**
 * The rollout worker's typed configuration, built in one place: defaults, then
 * an optional TOML file (`--config FILE`, snake_case keys, unknown keys are
 * errors), then command-line flags. Nothing else reads flags or files.
 */
import { readFileSync } from "node:fs";
import { parse } from "smol-toml";
import { isControlAddress as isEngineAddress } from "../engine/index.ts";
import { dockerEndpoint } from "../sandbox/index.ts";
import { DEFAULT_CPU_OVERSUBSCRIPTION, parseDockerHostSpec } from "./hosts.ts";
import { harnessMixSpec, parseHarnessMix } from "./harness-mix.ts";
import { OVER_LENGTH_POLICIES, type OverLengthPolicy } from "./over-length.ts";

export interface WorkerConfig {
  /** Task source (directory, .jsonl, task list, suite name), as `lego eval --tasks`. */
  tasks: string;
  /** `oracle`, `empty`, a registered harness adapter's name, or a mix `a=0.5,b=0.5` (harness-mix.ts; a TOML table `[harness]` in the file). */
  harness: string;
  /** Engine behind a harness's proxy session (required for adapters, unused by oracle/empty): a scripted engine's name or a real engine's tcp://HOST:PORT or unix:///PATH. */
  engine: string | null;
  /** With an engine address: the model directory it serves (the proxy's tokenizer and chat template). */
  modelDir: string | null;
  /** With an engine address: sampling temperature of every turn. */
  temperature: number;
  /** With an engine address: completion tokens per turn at most. */
  maxTokensPerTurn: number;
  /**
   * With an engine address: how long a turn waits for an engine that is away (restarting, stopped) before it
   * fails and the rollout ends env_error engine_unreachable (retried). Keep it below the agent-stage timeout.
   */
  engineWaitMs: number;
  /** The harness's model calls per rollout at most. */
  maxTurns: number;
  /** Rollouts per task; a group ships when all of them are final. */
  groupSize: number;
  /** Rollouts in flight at once. */
  concurrency: number;
  /** The trainer's data-plane receiver, e.g. tcp://127.0.0.1:5555. */
  trainer: string;
  /** Pause new groups while the trainer is more than this many versions ahead; null = unbounded. */
  maxStaleness: number | null;
  /**
   * One group at a time, each started only once the trainer has finished the step that consumed
   * the previous one and published its weights (Sender.waitUntilTrained, at most drainTimeoutMs
   * per step): every token is sampled by the weights the trainer then updates, so rollout and
   * trainer probabilities measure fidelity alone, not policy lag. Off: groups overlap (faster).
   */
  onPolicy: boolean;
  /** Attempts per rollout while it ends in env_error; then the group ships without it. */
  maxAttempts: number;
  /** Warm containers per image and stage. */
  warmPool: number;
  /** The sender's durable spool (batches survive a trainer or worker restart). */
  spoolDir: string;
  /** Stable name of this worker; part of every batch id and trajectory id. */
  producerId: string;
  /** How long the worker waits at the end for the trainer to acknowledge everything. */
  drainTimeoutMs: number;
  /** Only the first N tasks (0 = all). */
  limit: number;
  /**
   * Docker endpoints sandboxes are spread over (`unix:///PATH`, `tcp://HOST:PORT`, `ssh://USER@HOST`,
   * each optionally `=SLOTS`); empty = the process's one daemon (DOCKER_HOST or the default socket).
   */
  dockerHosts: string[];
  /** At the end, how long the worker waits for a lost Docker host to answer so it can remove its containers there. */
  lostHostWaitMs: number;
  /**
   * A Docker host given without `=SLOTS` runs at most NCPU × this / (each sandbox's CPUs) attempts at once (and no more
   * than its memory fits, nor the concurrency): agent containers mostly wait on the model (hosts.ts says how the default was chosen).
   */
  cpuOversubscription: number;
  /** The trainer's maximum sequence (tokens per segment, one forward pass); null = no bound. */
  maxSequenceTokens: number | null;
  /** What happens to a trajectory over that bound: `drop` (with the reason logged) or `truncate` (loss mask cut with it). */
  overLength: OverLengthPolicy;
}

export const DEFAULT_WORKER_CONFIG: Omit<WorkerConfig, "tasks" | "harness" | "trainer"> = {
  engine: null,
  modelDir: null,
  temperature: 1,
  maxTokensPerTurn: 2048,
  engineWaitMs: 60_000,
  maxTurns: 30,
  groupSize: 4,
  concurrency: 4,
  maxStaleness: null,
  onPolicy: false,
  maxAttempts: 3,
  warmPool: 0,
  spoolDir: ".lego-rl/rollout-spool",
  producerId: "rollout",
  drainTimeoutMs: 120_000,
  limit: 0,
  dockerHosts: [],
  lostHostWaitMs: 10_000,
  cpuOversubscription: DEFAULT_CPU_OVERSUBSCRIPTION,
  maxSequenceTokens: null,
  overLength: "drop",
};

export class WorkerConfigError extends Error {
  override name = "WorkerConfigError";
}

/** TOML key → field, with the value's kind. */
const FIELDS: Record<string, { key: keyof WorkerConfig; kind: "string" | "int" | "int?" | "string?" | "number" | "bool" | "string[]" | "mix" }> = {
  tasks: { key: "tasks", kind: "string" },
  harness: { key: "harness", kind: "mix" },
  engine: { key: "engine", kind: "string?" },
  model_dir: { key: "modelDir", kind: "string?" },
  temperature: { key: "temperature", kind: "number" },
  max_tokens_per_turn: { key: "maxTokensPerTurn", kind: "int" },
  engine_wait_ms: { key: "engineWaitMs", kind: "int" },
  max_turns: { key: "maxTurns", kind: "int" },
  group_size: { key: "groupSize", kind: "int" },
  concurrency: { key: "concurrency", kind: "int" },
  trainer: { key: "trainer", kind: "string" },
  max_staleness: { key: "maxStaleness", kind: "int?" },
  on_policy: { key: "onPolicy", kind: "bool" },
  max_attempts: { key: "maxAttempts", kind: "int" },
  warm_pool: { key: "warmPool", kind: "int" },
  spool_dir: { key: "spoolDir", kind: "string" },
  producer_id: { key: "producerId", kind: "string" },
  drain_timeout_ms: { key: "drainTimeoutMs", kind: "int" },
  limit: { key: "limit", kind: "int" },
  docker_hosts: { key: "dockerHosts", kind: "string[]" },
  lost_host_wait_ms: { key: "lostHostWaitMs", kind: "int" },
  cpu_oversubscription: { key: "cpuOversubscription", kind: "number" },
  max_sequence_tokens: { key: "maxSequenceTokens", kind: "int?" },
  over_length: { key: "overLength", kind: "string" },
};

/** Reads a TOML config file; every key must be a known field of the right type. */
export function readWorkerConfigFile(file: string): Partial<WorkerConfig> {
  let doc: Record<string, unknown>;
  try {
    doc = parse(readFileSync(file, "utf8")) as Record<string, unknown>;
  } catch (e) {
    throw new WorkerConfigError(`${file}: ${(e as Error).message}`);
  }
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(doc)) {
    const f = FIELDS[k];
    if (!f) throw new WorkerConfigError(`${file}: unknown key ${JSON.stringify(k)} (known: ${Object.keys(FIELDS).join(", ")})`);
    if (f.kind === "mix" && typeof v === "object" && v !== null && !Array.isArray(v)) {
      // `[harness]` with NAME = WEIGHT lines: the same mix as the flag's string.
      try {
        out[f.key] = harnessMixSpec(v as Record<string, unknown>);
      } catch (e) {
        throw new WorkerConfigError(`${file}: ${(e as Error).message}`);
      }
      continue;
    }
    const ok = f.kind === "number" ? typeof v === "number" : f.kind === "bool" ? typeof v === "boolean" : f.kind.startsWith("int") ? Number.isInteger(v)
      : f.kind === "string[]" ? Array.isArray(v) && v.every((x) => typeof x === "string") : typeof v === "string";
    const want = f.kind === "number" ? "a number" : f.kind === "bool" ? "true or false" : f.kind.startsWith("int") ? "an integer" : f.kind === "string[]" ? "a list of strings" : "a string";
    if (!ok) throw new WorkerConfigError(`${file}: ${k} must be ${want}, got ${JSON.stringify(v)}`);
    out[f.key] = v;
  }
  return out as Partial<WorkerConfig>;
}

/** Defaults ← file ← flags (undefined flags do not override), then checked. */
export function buildWorkerConfig(file: Partial<WorkerConfig>, flags: Partial<WorkerConfig>): WorkerConfig {
  const defined = Object.fromEntries(Object.entries(flags).filter(([, v]) => v !== undefined));
  const cfg = { ...DEFAULT_WORKER_CONFIG, ...file, ...defined } as WorkerConfig;
  for (const k of ["tasks", "harness", "trainer"] as const) if (!cfg[k]) throw new WorkerConfigError(`${k} is required (flag --${k} or key ${k} in the config file)`);
  const positive = { groupSize: "group-size", concurrency: "concurrency", maxAttempts: "max-attempts", maxTokensPerTurn: "max-tokens-per-turn", maxTurns: "max-turns", engineWaitMs: "engine-wait-ms" } as const;
  for (const [k, flag] of Object.entries(positive)) {
    const v = cfg[k as keyof typeof positive];
    if (!Number.isInteger(v) || v < 1) throw new WorkerConfigError(`--${flag} must be a positive integer, got ${v}`);
  }
  if (cfg.maxSequenceTokens !== null && (!Number.isInteger(cfg.maxSequenceTokens) || cfg.maxSequenceTokens < 1)) throw new WorkerConfigError(`--max-sequence-tokens must be a positive integer, got ${cfg.maxSequenceTokens}`);
  if (!(OVER_LENGTH_POLICIES as readonly string[]).includes(cfg.overLength)) throw new WorkerConfigError(`--over-length must be ${OVER_LENGTH_POLICIES.join(" or ")}, got ${JSON.stringify(cfg.overLength)}`);
  if (cfg.maxStaleness !== null && (!Number.isInteger(cfg.maxStaleness) || cfg.maxStaleness < 0)) throw new WorkerConfigError(`--max-staleness must be a non-negative integer, got ${cfg.maxStaleness}`);
  if (!/^(tcp|ipc):\/\//.test(cfg.trainer)) throw new WorkerConfigError(`--trainer must be a tcp:// or ipc:// address, got ${cfg.trainer}`);
  let shares;
  try {
    shares = parseHarnessMix(cfg.harness);
  } catch (e) {
    throw new WorkerConfigError((e as Error).message);
  }
  const proxied = shares.filter((h) => !["oracle", "empty"].includes(h.name));
  if (proxied.length && !cfg.engine) throw new WorkerConfigError(`--harness ${proxied.map((h) => h.name).join(", ")} needs --engine`);
  if (!(typeof cfg.temperature === "number" && cfg.temperature > 0)) throw new WorkerConfigError(`--temperature must be > 0, got ${cfg.temperature}`);
  // A real engine's address needs the model it serves: the proxy tokenizes with it.
  for (const h of cfg.dockerHosts) {
    try {
      dockerEndpoint(parseDockerHostSpec(h).endpoint);
    } catch (e) {
      throw new WorkerConfigError(`--docker-host: ${(e as Error).message}`);
    }
  }
  if (new Set(cfg.dockerHosts).size !== cfg.dockerHosts.length) throw new WorkerConfigError(`--docker-host given twice: ${cfg.dockerHosts.join(", ")}`);
  if (!(typeof cfg.cpuOversubscription === "number" && cfg.cpuOversubscription > 0)) throw new WorkerConfigError(`--cpu-oversubscription must be > 0, got ${cfg.cpuOversubscription}`);
  if (!Number.isInteger(cfg.lostHostWaitMs) || cfg.lostHostWaitMs < 0) throw new WorkerConfigError(`lost_host_wait_ms must be a non-negative integer, got ${cfg.lostHostWaitMs}`);
  if (cfg.engine && isEngineAddress(cfg.engine) && !cfg.modelDir) throw new WorkerConfigError(`--engine ${cfg.engine} needs --model-dir (the model directory the engine serves)`);
  return cfg;
}
