/** Public surface of the rollout concern (the worker that turns tasks into trajectories). */
export { RolloutRunner, DEFAULT_RUNNER_CONFIG, type RolloutRunnerConfig } from "./runner.ts";
export { UNBOUNDED_SHIP, buildTrajectory, tokenCounts, type SessionRecords, type ShipContext, type TrajectoryIdentity, type TrajectoryInput } from "./trajectory.ts";
export { RolloutEvents, type RolloutEvent, type RolloutEventKind } from "./events.ts";
export { mayStartRollout, overStalenessBound, policyVersionRange, type StalenessBound } from "./staleness.ts";
export { fitToLength, overLengthReason, truncateSegment, type LengthPolicy, type OverLengthPolicy } from "./over-length.ts";
export { runWorkerLoop, type TrajectorySink, type WorkerLoopOptions, type WorkerResult } from "./worker.ts";
export { SummaryCollector, formatSummary, jsonLines, type RunSummary } from "./summary.ts";
export { DEFAULT_WORKER_CONFIG, WorkerConfigError, buildWorkerConfig, readWorkerConfigFile, type WorkerConfig } from "./config.ts";
