/** Public surface of the tasks component: task sources, formats, suites, health checks and evaluation. */
export { defaultTasksConfig, type TasksConfig } from "./config.ts";
export { TaskRepoError, TaskSourceError, isTaskSourceError } from "./errors.ts";
export { once, taskHash, type Split, type Task } from "./task.ts";
export { formatSweBenchJsonl, parseSweBenchJsonl, toSweBenchRecord, type LegoExtras, type SweBenchRecord } from "./swebench.ts";
export { materializeRecord, type RepoRef } from "./materialize.ts";
export { harborFromRecord, harborRecord, harborTask } from "./harbor.ts";
export { locateRepo, openTaskSource, recordTasks, type TaskList, type TaskSet } from "./sources.ts";
export { SUITES, builtinSuite, builtinSuiteDir, easySuite, parseSuiteSpec } from "./suites.ts";
export { DEFAULT_EASY, easyFamily, type EasyConfig } from "./easy.ts";
export { exportHarbor, exportSweBench } from "./export.ts";
export { emptyAgent, harnessLauncher, oracleAgent, registerHarness, registeredHarnesses, type AgentLauncher, type AgentRollout, type HarnessFactory, type HarnessOptions } from "./agents.ts";
export { evalCommand, tasksCommand } from "./cli.ts";
export { evaluate, formatTable, mixedTaskList, passAtK, type EvalReport, type EvalRow, type TaskScore } from "./eval.ts";
export { DEFAULT_MINE, mineBuiltin, readSdist, type MineOptions, type ProjectStats } from "./mine.ts";
export { BUILTIN_PROJECTS, pinnedSdists, type MinedProject } from "./projects.ts";
export { HealthStore, checkHealth, healthyOnly, runRollout, type HealthResult, type RolloutSummary } from "./health.ts";
