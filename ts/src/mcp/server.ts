/**
 * MCP server over a run: status, alerts, metrics and single trajectories, so an engineer's own
 * coding agent can watch and diagnose a run. Reads a RunView, so it serves recorded runs and,
 * once wired, live ones the same way.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import type { Alert, Signal } from "../monitor/index.ts";
import type { BatchHeader, Trajectory } from "../schema/index.ts";

/** One spooled rollout batch, decoded. */
export interface SpooledBatch {
  header: BatchHeader;
  trajectories: Trajectory[];
}

export interface RunView {
  steps(): { step: number; signal: Signal }[];
  /** Rollout batches in the order they were spooled. */
  batches(): SpooledBatch[];
  alerts(): Alert[];
  trajectories(): Trajectory[];
}

const json = (o: unknown) => ({ content: [{ type: "text" as const, text: JSON.stringify(o) }] });

/** Token arrays become plain lists so the JSON stays readable to a model. */
const plainTrajectory = (t: Trajectory) => JSON.parse(JSON.stringify(t, (_k, v) => (ArrayBuffer.isView(v) ? Array.from(v as unknown as number[]) : v)));

export function runServer(view: RunView): McpServer {
  const server = new McpServer({ name: "lego-rl", version: "0.1.0" });
  server.registerTool("run_status", { description: "Steps trained, latest step metrics, alert and trajectory counts" }, () => {
    const steps = view.steps();
    return json({ steps: steps.length, latest: steps.at(-1) ?? null, alerts: view.alerts().length, trajectories: view.trajectories().length });
  });
  server.registerTool("alerts", { description: "Alerts the monitor raised, newest last, each with threshold, window and what to check" }, () => json(view.alerts()));
  server.registerTool("metrics", { description: "One metric's values per step", inputSchema: { key: z.string() } }, ({ key }) =>
    json(view.steps().filter((s) => s.signal[key] !== undefined).map((s) => ({ step: s.step, value: s.signal[key] }))));
  server.registerTool("trajectory", { description: "One trajectory by id: status, reward, flags, metrics, segments with tokens", inputSchema: { id: z.string() } }, ({ id }) => {
    const t = view.trajectories().find((x) => x.trajectory_id === id);
    return t ? json(plainTrajectory(t)) : { isError: true, content: [{ type: "text" as const, text: `no trajectory ${id}; call run_status for counts` }] };
  });
  return server;
}
