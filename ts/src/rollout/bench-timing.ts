/**
 * Instruments for `pnpm bench:rollout`: where a rollout's time goes. Each
 * piece wraps a real component (the runner, an engine, the launcher, the
 * sink) and only adds up wall time, so the worker runs exactly as it does in
 * production; the split is then per rollout:
 *   sandbox   = the runner's rollout minus its agent stage (containers, setup, grading)
 *   harness   = the agent stage minus the proxy's requests (the harness process, its tools,
 *               and the stage's own checks after the agent exits)
 *   proxy     = the proxy's requests minus the engine, plus each rollout's proxy start and close
 *   engine    = the engine's generate calls
 *   transport = the sink's send calls and the final drain (spool, ZeroMQ, acks)
 */
import type { EngineClient, GenerateChunk, GenerateRequest } from "../engine/index.ts";
import type { RoutingShape, Trajectory } from "../schema/index.ts";
import type { RolloutOutcome, RolloutRequest } from "../sandbox/index.ts";
import type { AgentLauncher } from "../tasks/index.ts";
import { RolloutRunner } from "./runner.ts";
import type { TrajectorySink } from "./worker.ts";

export interface TimeTotals {
  rollouts: number;
  runnerMs: number;
  setupMs: number;
  agentMs: number;
  gradingMs: number;
  proxyRequestMs: number;
  proxyRequests: number;
  proxyLifecycleMs: number;
  engineMs: number;
  engineCalls: number;
  transportMs: number;
}

export const emptyTotals = (): TimeTotals => ({
  rollouts: 0, runnerMs: 0, setupMs: 0, agentMs: 0, gradingMs: 0, proxyRequestMs: 0, proxyRequests: 0, proxyLifecycleMs: 0, engineMs: 0, engineCalls: 0, transportMs: 0,
});

/** The runner, timing every rollout it runs and its stages. */
export class TimedRunner extends RolloutRunner {
  constructor(readonly totals: TimeTotals, config: ConstructorParameters<typeof RolloutRunner>[0]) {
    super(config);
  }

  override async run(req: RolloutRequest): Promise<RolloutOutcome> {
    const t0 = performance.now();
    const o = await super.run(req);
    this.totals.rollouts += 1;
    this.totals.runnerMs += performance.now() - t0;
    this.totals.setupMs += o.timingsMs.setup ?? 0;
    this.totals.agentMs += o.timingsMs.agent ?? 0;
    this.totals.gradingMs += o.timingsMs.grading ?? 0;
    return o;
  }
}

/** An engine whose generate calls are timed from the call to the last chunk. */
export function timedEngine(inner: EngineClient, totals: TimeTotals): EngineClient {
  return {
    name: inner.name,
    ...(inner.contextWindow ? { contextWindow: () => inner.contextWindow!() } : {}),
    close: () => inner.close(),
    async *generate(req: GenerateRequest, signal?: AbortSignal): AsyncIterable<GenerateChunk> {
      const t0 = performance.now();
      try {
        yield* inner.generate(req, signal);
      } finally {
        totals.engineMs += performance.now() - t0;
        totals.engineCalls += 1;
      }
    },
  };
}

/** The launcher, timing each rollout's start (proxy server, session) and finish (session close, proxy close). */
export function timedLauncher(inner: AgentLauncher, totals: TimeTotals): AgentLauncher {
  return {
    ...inner,
    name: inner.name,
    async start(task, def, rolloutId) {
      const t0 = performance.now();
      const agent = await inner.start(task, def, rolloutId);
      totals.proxyLifecycleMs += performance.now() - t0;
      if (!agent.finish) return agent;
      const finish = agent.finish;
      return {
        ...agent,
        async finish(outcome) {
          const t1 = performance.now();
          try {
            return await finish(outcome);
          } finally {
            totals.proxyLifecycleMs += performance.now() - t1;
          }
        },
      };
    },
  };
}

/** The sink, timing each group's send. */
export function timedSink(inner: TrajectorySink, totals: TimeTotals): TrajectorySink {
  return {
    get policyVersion() {
      return inner.policyVersion;
    },
    waitForPolicyVersion: (v, t) => inner.waitForPolicyVersion(v, t),
    async send(trajectories: readonly Trajectory[], routing: RoutingShape | null) {
      const t0 = performance.now();
      try {
        return await inner.send(trajectories, routing);
      } finally {
        totals.transportMs += performance.now() - t0;
      }
    },
  };
}

export interface TimeSplit {
  sandbox: number;
  harness: number;
  proxy: number;
  engine: number;
  transport: number;
}

/** Seconds per rollout in each part (module doc), rounded to ms. */
export function timeSplit(t: TimeTotals): TimeSplit {
  const per = (ms: number) => Math.round(ms / Math.max(1, t.rollouts)) / 1000;
  return {
    sandbox: per(t.runnerMs - t.agentMs),
    harness: per(t.agentMs - t.proxyRequestMs),
    proxy: per(t.proxyRequestMs - t.engineMs + t.proxyLifecycleMs),
    engine: per(t.engineMs),
    transport: per(t.transportMs),
  };
}
