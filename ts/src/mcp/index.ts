export { runServer, type RunView, type SpooledBatch } from "./server.ts";
export { mcpCommand } from "./cli.ts";
export { RunDirError, runDirView } from "./run-dir.ts";
