export { assetsBuilt, buildUiAssets, DEFAULT_ASSETS_DIR } from "./assets.ts";
export { uiCommand } from "./cli.ts";
export { UiServer, type UiServerConfig } from "./server.ts";
export { runSnapshot, trajectoryView, type RunSnapshot, type TrajectorySummary, type TrajectoryView, type TurnView, type TokenRun } from "./snapshot.ts";
export { TokenText, type TurnMessage } from "./text.ts";
