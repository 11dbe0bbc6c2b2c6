/**
 * Rollout concern: runs rollouts through their stages with a concurrency limit, warm pools per
 * hot image and env_error retries. Also the process's sandbox owner: it reaps
 * leftovers of dead runs when it starts and removes its own on close().
 */
import {
  AgentSandbox,
  ConcurrencyLimit,
  DEFAULT_LIMITS,
  drainQuotaPools,
  reapDeadRuns,
  removeRolloutContainers,
  runStages,
  Sandbox,
  WarmPool,
  currentDockerEndpoint,
  type RolloutOutcome,
  type RolloutRequest,
  type RuntimeMount,
  type SandboxLimits,
  type SandboxSource,
  type StageConfig,
} from "../sandbox/index.ts";

export interface RolloutRunnerConfig {
  /** Rollouts in flight at once. */
  concurrency: number;
  /** Attempts per rollout while the outcome is env_error (1 = no retry). */
  maxAttempts: number;
  /** Warm sandboxes kept per image and stage; 0 disables the pool. */
  warmPoolSize: number;
  limits: SandboxLimits;
  runtimes: RuntimeMount[];
  onProtectedChange: "restore" | "reject";
  /** Largest agent workspace (as tar) copied to grading. */
  maxWorkspaceBytes: number;
}

export const DEFAULT_RUNNER_CONFIG: RolloutRunnerConfig = {
  concurrency: 4,
  maxAttempts: 3,
  warmPoolSize: 0,
  limits: DEFAULT_LIMITS,
  runtimes: [],
  onProtectedChange: "restore",
  maxWorkspaceBytes: 256 * 1024 * 1024,
};

type Box = AgentSandbox | Sandbox;

export class RolloutRunner implements SandboxSource {
  readonly config: RolloutRunnerConfig;
  private readonly limit: ConcurrencyLimit;
  private readonly agentPools = new Map<string, WarmPool<AgentSandbox>>();
  private readonly gradingPools = new Map<string, WarmPool<Sandbox>>();
  private readonly removals = new Set<Promise<void>>();
  /** Rollout ids this runner ran, so close() can sweep what a failed removal left. */
  private readonly ran = new Set<string>();
  /** Removal failures, kept for the operator (a failed removal is reaped later). */
  readonly removalErrors: unknown[] = [];

  /** Prefer create(), which first reaps leftovers of dead runs. */
  constructor(config: Partial<RolloutRunnerConfig> = {}) {
    this.config = { ...DEFAULT_RUNNER_CONFIG, ...config };
    this.limit = new ConcurrencyLimit(this.config.concurrency);
  }

  /** Reaps leftovers of dead runs, then returns a runner. */
  static async create(config: Partial<RolloutRunnerConfig> = {}): Promise<RolloutRunner> {
    await reapDeadRuns();
    return new RolloutRunner(config);
  }

  /** Starts warm pools for an image (agent and grading containers). */
  async warm(image: string): Promise<void> {
    if (this.config.warmPoolSize < 1) return;
    await Promise.all([this.agentPool(image).whenFull(), this.gradingPool(image).whenFull()]);
  }

  async run(req: RolloutRequest): Promise<RolloutOutcome> {
    const stageCfg: StageConfig = {
      limits: this.config.limits,
      runtimes: this.config.runtimes,
      onProtectedChange: this.config.onProtectedChange,
      maxWorkspaceBytes: this.config.maxWorkspaceBytes,
    };
    this.ran.add(req.rolloutId);
    return this.limit.run(async () => {
      let outcome: RolloutOutcome | undefined;
      for (let attempt = 1; attempt <= this.config.maxAttempts; attempt++) {
        outcome = { ...(await runStages({ ...req, rolloutId: `${req.rolloutId}.${attempt}` }, this, stageCfg)), attempts: attempt };
        if (outcome.status !== "env_error") break;
      }
      return outcome!;
    });
  }

  agent(image: string, rolloutId: string): Promise<AgentSandbox> {
    if (this.config.warmPoolSize > 0) return this.agentPool(image).acquire();
    return this.startAgent(image, rolloutId);
  }

  grading(image: string, rolloutId: string): Promise<Sandbox> {
    if (this.config.warmPoolSize > 0) return this.gradingPool(image).acquire();
    return Sandbox.start({ image, rolloutId, stage: "grading", limits: this.config.limits });
  }

  discard(box: Box): void {
    const p = box.remove().catch((e: unknown) => void this.removalErrors.push(e));
    this.removals.add(p);
    void p.finally(() => this.removals.delete(p));
  }

  /** Waits for background removals and empties the pools. */
  async close(): Promise<void> {
    await Promise.all([...this.agentPools.values(), ...this.gradingPools.values()].map((p) => p.close()));
    while (this.removals.size) await Promise.all([...this.removals]);
    // A removal that failed while the daemon was away left its container; sweep them now it answers.
    // Still unreachable: recorded, and the next run's reaper removes them once this process is gone.
    await removeRolloutContainers(this.ran).catch((e: unknown) => void this.removalErrors.push(e));
    // Prepared quota filesystems no container took (the pool is the process's; a later start refills it).
    await drainQuotaPools();
  }

  private startAgent(image: string, rolloutId: string): Promise<AgentSandbox> {
    return AgentSandbox.start({ image, rolloutId, limits: this.config.limits, runtimes: this.config.runtimes });
  }

  /** Pools are per Docker host (the scope the rollout was placed in) and image. */
  private poolKey(image: string): string {
    return `${currentDockerEndpoint()?.name ?? ""}\0${image}`;
  }

  private agentPool(image: string): WarmPool<AgentSandbox> {
    const key = this.poolKey(image);
    let pool = this.agentPools.get(key);
    if (!pool) {
      // Pool containers are labelled rollout "pool"; the run label still ties them to this run.
      pool = new WarmPool(() => this.startAgent(image, "pool"), (b) => b.remove(), { size: this.config.warmPoolSize, fillConcurrency: 1 }).start();
      this.agentPools.set(key, pool);
    }
    return pool;
  }

  private gradingPool(image: string): WarmPool<Sandbox> {
    const key = this.poolKey(image);
    let pool = this.gradingPools.get(key);
    if (!pool) {
      pool = new WarmPool(
        () => Sandbox.start({ image, rolloutId: "pool", stage: "grading", limits: this.config.limits }),
        (b) => b.remove(),
        { size: this.config.warmPoolSize, fillConcurrency: 1 },
      ).start();
      this.gradingPools.set(key, pool);
    }
    return pool;
  }
}
