export { checkCommand } from "./cli.ts";
export { checkDisk, checkDocker, checkPort, checkRuntimes, preflight, type CheckResult, type PreflightConfig } from "./preflight.ts";
export { checkTemplateRoundTrip, checkTokenizer, modelChecks } from "./model-checks.ts";
export { checkRouting, type RoutingEngine } from "./routing-check.ts";
export { checkTrainer } from "./trainer-check.ts";
export { checkJobFile } from "./job-check.ts";
