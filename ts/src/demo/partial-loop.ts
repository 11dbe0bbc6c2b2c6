/**
 * The most complete path that works until the end-to-end demo exists:
 * TypeScript builds a group of rollout trajectories shaped like the tiny MoE
 * policy's (4 MoE layers, top-2 of 8 experts), encodes them as Arrow batches
 * into a spool folder, and the Python side decodes, validates and summarises
 * them with zero-copy routing views. It says plainly what it does not do yet.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { encodeBatch, type RoutingShape, type Trajectory } from "../schema/index.ts";
import { REPO_ROOT } from "../repo-root.ts";
import { synthetic } from "../schema/index.ts";

export interface PartialLoopOptions {
  /** Folder that receives the Arrow batches (emptied first). */
  readonly spoolDir: string;
  /** Rollouts per task group. */
  readonly groupSize: number;
  /** Task groups (one batch file each). */
  readonly groups: number;
}

const TINY_MOE_ROUTING: RoutingShape = { layers: 4, top_k: 2, num_experts: 8 };

function sampleRollout(group: number, index: number): Trajectory {
  const turns = 2 + ((group + index) % 3);
  return synthetic.buildTrajectory(
    {
      trajectory_id: `demo-g${group}-r${index}`,
      group_id: `demo-g${group}`,
      task_id: `builtin/fix-off-by-one-${group}`,
      harness: "reference",
      status: "ok",
      reward: index % 2 === 0 ? 1 : 0,
      attempt: 0,
      defense_flags: [],
      error: null,
      metrics: { turns, tool_calls: turns - 1, rereads_after_edit: index % 2, side_thread_turns: 0, rolled_back_turns: 0, wall_time_s: 1 + index },
      segments: [
        {
          segment_id: `demo-g${group}-r${index}-s0`,
          thread: "main",
          thread_id: "main",
          seal_reason: "finished",
          seed: group * 100 + index,
          turns: Array.from({ length: turns }, (_, t) => ({
            turn_id: `t${t}`,
            prompt: t === 0 ? 120 : 40,
            completion: 30 + 7 * t,
            tail: 1,
            policy_version: 0,
            finish_reason: "stop" as const,
          })),
        },
      ],
    },
    TINY_MOE_ROUTING,
  );
}

export function runPartialLoop(options: PartialLoopOptions): number {
  console.log(
    "lego demo --schema-only: the end-to-end loop (harness -> proxy -> engine -> sandbox -> trainer) is not built yet.\n" +
      "This run is only the schema round trip: TypeScript writes rollout batches in the shared Arrow schema,\n" +
      "Python decodes and validates them and views the routing buffers without a copy.\n",
  );
  rmSync(options.spoolDir, { recursive: true, force: true });
  mkdirSync(options.spoolDir, { recursive: true });
  const files: string[] = [];
  for (let group = 0; group < options.groups; group++) {
    const rows = Array.from({ length: options.groupSize }, (_, i) => sampleRollout(group, i));
    const path = join(options.spoolDir, `group-${group}.arrow`);
    writeFileSync(path, encodeBatch("Trajectory", rows, TINY_MOE_ROUTING));
    files.push(path);
  }
  console.log(`TypeScript: wrote ${files.length} batch(es) of ${options.groupSize} rollouts to ${options.spoolDir}\n`);
  const python = join(REPO_ROOT, ".venv/bin/python");
  const result = spawnSync(python, ["-m", "lego_rl.schema.inspect", ...files], { stdio: "inherit", cwd: REPO_ROOT });
  if (result.error) throw result.error;
  return result.status ?? 1;
}
