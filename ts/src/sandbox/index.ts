/** Public surface of the sandbox component. */
export type { AgentRecordFile, AgentRunRecord, DefenseFlag, EnvErrorKind, OutcomeStatus, RolloutOutcome, SandboxLimits, SandboxStage } from "./types.ts";
export { DEFAULT_LIMITS, DEFENSE_FLAG_VALUES, ENV_ERROR_KIND_VALUES, LABEL } from "./types.ts";
export { DEFAULT_SANDBOX_HOST, configureSandboxHost, sandboxHost, sandboxHostFromEnv, type SandboxHostSettings } from "./host-settings.ts";
export { SandboxEnvError, TaskFormatError, isSandboxEnvError } from "./errors.ts";
export { DEFAULT_BASE, baseImageTag, ensureBaseImage, type BaseImageSpec } from "./base-image.ts";
export { ensureTaskImage, taskImageTag, type TaskImage } from "./task-image.ts";
export { DEFAULT_TASK_CONFIG, loadTask, namedTests, readTaskConfig, type TaskConfig, type TaskDefinition, type WorkspaceOverlay } from "./task.ts";
export { Sandbox, type ExecOptions, type ExecResult, type SandboxSpec } from "./container.ts";
export { AgentSandbox, type RuntimeMount } from "./agent-sandbox.ts";
export { WarmPool, type WarmPoolConfig } from "./warm-pool.ts";
export { ConcurrencyLimit } from "./concurrency.ts";
// The rollout runner lives in ../rollout/; these are the stage seams it drives.
export { runStages, type AgentProgram, type RecordFileSpec, type RolloutRequest, type SandboxSource, type StageConfig } from "./stages.ts";
export { DEFAULT_PROTECTED_PATHS, ProtectedPaths } from "./protected-paths.ts";
export { FORWARDER_PORT } from "./proxy-route.ts";
export { containersOfProcess, reapDeadRuns, removeRolloutContainers, removeRunContainers } from "./reaper.ts";
export { currentDockerEndpoint, dockerEndpoint, withDockerEndpoint, type DockerEndpoint } from "./docker.ts";
export { copyImage } from "./image-copy.ts";
export { imageExists } from "./base-image.ts";
export { drainQuotaPools, warmQuotaPool } from "./quota-pool.ts";
export { collectImages, type ImageGcPolicy } from "./image-gc.ts";
export { checkTask, oracleProgram, type TaskCheck } from "./check.ts";
export { sandboxCommand } from "./cli.ts";
// Task sources pack and hash trees the way task images do.
export { filesOfDir, unpack, type TarEntry, type TarFile } from "./tar.ts";
export { hashTree } from "./hash.ts";
