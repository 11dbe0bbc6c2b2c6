/** Public surface of the rollout concern (the worker that turns tasks into trajectories). */
export { RolloutRunner, DEFAULT_RUNNER_CONFIG, type RolloutRunnerConfig } from "./runner.ts";
export { buildTrajectory, type SessionRecords, type TrajectoryIdentity, type TrajectoryInput } from "./trajectory.ts";
export { RolloutEvents, type RolloutEvent, type RolloutEventKind } from "./events.ts";
export { mayStartRollout, oldestPolicyVersion, overStalenessBound, staleAtShip, type StaleTrajectory, type StalenessBound } from "./staleness.ts";
export { runWorkerLoop, type TrajectorySink, type WorkerLoopOptions, type WorkerResult } from "./worker.ts";
export { SummaryCollector, formatSummary, jsonLines, type RunSummary } from "./summary.ts";
export { DEFAULT_WORKER_CONFIG, WorkerConfigError, buildWorkerConfig, readWorkerConfigFile, type WorkerConfig } from "./config.ts";
