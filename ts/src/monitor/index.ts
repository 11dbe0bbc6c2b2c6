export { Monitor, type MonitorOptions } from "./monitor.ts";
export { type Alert, type AlertKind, defaultRules, type Rule, type Signal } from "./rules.ts";
export { monitorStepLog, parseStepLine, StepLogError } from "./step-log.ts";
export { batchSignal } from "./batch-signal.ts";
