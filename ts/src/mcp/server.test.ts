/** The official MCP client reads an alert and a trajectory from the run server. */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { describe, expect, it } from "vitest";
import { batchSignal, Monitor } from "../monitor/index.ts";
import { decodeBatch, type RoutingShape, type Trajectory } from "../schema/index.ts";
import { encodeTrajectoryBatch, replicate, syntheticTrajectory } from "../transport/index.ts";
import { runServer } from "./index.ts";

const routing: RoutingShape = { layers: 2, top_k: 2, num_experts: 8 };

describe("lego MCP server", () => {
  it("serves an alert and a trajectory to the official client", { timeout: 30_000 }, async () => {
    const rows = replicate(syntheticTrajectory("t", 120, routing), 2, "s").map((t) => ({ ...t, defense_flags: ["grader_tampering"] }));
    const trajectories = decodeBatch(encodeTrajectoryBatch(rows, routing, { batchId: "b", producerId: "w", seq: 0 }).payload, "Trajectory").rows as Trajectory[];
    const monitor = new Monitor();
    const steps = [0, 1, 2, 3, 4].map((i) => ({ step: i, signal: batchSignal(trajectories) }));
    for (const s of steps) monitor.observe(s.step, s.signal);
    const server = runServer({ steps: () => steps, batches: () => [], alerts: () => monitor.alerts, trajectories: () => trajectories });
    const [a, b] = InMemoryTransport.createLinkedPair();
    const client = new Client({ name: "test", version: "0" });
    await Promise.all([server.connect(a), client.connect(b)]);
    try {
      const alerts = await client.callTool({ name: "alerts", arguments: {} });
      const parsed = JSON.parse((alerts.content as { text: string }[])[0]!.text);
      expect(parsed.map((x: { kind: string }) => x.kind)).toContain("reward_hack_rate");
      const id = trajectories[0]!.trajectory_id;
      const t = await client.callTool({ name: "trajectory", arguments: { id } });
      const traj = JSON.parse((t.content as { text: string }[])[0]!.text);
      expect(traj.trajectory_id).toBe(id);
      expect(traj.defense_flags).toEqual(["grader_tampering"]);
      expect(traj.segments[0].token_ids.length).toBeGreaterThan(0);
      const missing = await client.callTool({ name: "trajectory", arguments: { id: "nope" } });
      expect(missing.isError).toBe(true);
    } finally {
      await client.close();
      await server.close();
    }
  });
});

describe("lego mcp over stdio", () => {
  it("the official client reads a step log's alert through `lego mcp --run-dir`", { timeout: 60_000 }, async () => {
    const { StdioClientTransport } = await import("@modelcontextprotocol/sdk/client/stdio.js");
    const { mkdtempSync, rmSync, writeFileSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const { join, resolve } = await import("node:path");
    const dir = mkdtempSync(join(tmpdir(), "mcp-"));
    writeFileSync(join(dir, "steps.jsonl"), [1, 2].map((s) => JSON.stringify({ step: s, "optim/lr": s === 2 ? 0 : 1e-5 })).join("\n") + "\n");
    const client = new Client({ name: "test", version: "0" });
    try {
      await client.connect(new StdioClientTransport({ command: resolve(import.meta.dirname, "../../bin/lego"), args: ["mcp", "--run-dir", dir] }));
      const r = await client.callTool({ name: "alerts", arguments: {} });
      expect(JSON.parse((r.content as { text: string }[])[0]!.text)).toMatchObject([{ kind: "lr_zero", at: 2 }]);
      // A batch the sender's Spool writes (a real .lgrb file) is read as the run's trajectories.
      const { Spool } = await import("../transport/index.ts");
      const rows = replicate(syntheticTrajectory("t", 120, routing), 2, "sp");
      const { header, payload } = encodeTrajectoryBatch(rows, routing, { batchId: "b-0", producerId: "w", seq: 0 });
      new Spool(join(dir, "spool")).append(header, payload);
      const status = JSON.parse(((await client.callTool({ name: "run_status", arguments: {} })).content as { text: string }[])[0]!.text);
      expect(status).toMatchObject({ steps: 2, trajectories: 2 });
      const t = JSON.parse(((await client.callTool({ name: "trajectory", arguments: { id: "sp-1" } })).content as { text: string }[])[0]!.text);
      expect(t.trajectory_id).toBe("sp-1");
    } finally {
      await client.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
