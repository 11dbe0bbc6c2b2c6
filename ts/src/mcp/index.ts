export { runServer, type RunView } from "./server.ts";
export { mcpCommand } from "./cli.ts";
export { runDirView } from "./run-dir.ts";
