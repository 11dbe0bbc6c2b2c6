/**
 * Harness crash and hang inside a worker run of 4 groups (2 rollouts each):
 * the real reference agent in real sandboxes, through the proxy, driven by
 * scripted-gold engines; the real Sender and Python receiver. At a chosen
 * turn, while the agent waits on its model call, the test signals the agent's
 * own process from outside: SIGKILL is a crash (an OOM kill, a segfault, any
 * death the harness did not choose), SIGSTOP a hang (a harness stuck on
 * itself, which only the agent stage's wall-clock limit ends). From outside
 * rather than by the policy (a `kill $PPID` tool call would be the agent's
 * own act, and would land between turns), and with a turn in flight at the
 * proxy, where a dying client could be mistaken for a failing engine.
 *
 * Each such rollout is the agent's outcome: agent_error for the crash,
 * timeout for the hang, reward 0 — even after the fix was applied, since the
 * harness never finished — shipped like any other, never env_error, never
 * retried. The other rollouts score 1, the worker ships all 4 groups, the
 * receiver holds each of the 8 once, and no container is left.
 */
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { goldScript, HARNESS_TOOLS } from "../harness/index.ts";
import { dockerClient } from "../sandbox/docker.ts";
import { LABEL } from "../sandbox/index.ts";
import { leftoverContainers } from "../sandbox/test-support.ts";
import { defaultTasksConfig, openTaskSource, type Task } from "../tasks/index.ts";
import { Sender } from "../transport/index.ts";
import { RolloutEvents, RolloutRunner, runWorkerLoop, type RolloutEvent } from "./index.ts";
import { scriptedLauncher } from "./test-engines.ts";
import { receivedTrajectories, receiverFixture } from "./test-support.ts";

/** The agent stage's limit: what ends a hang. A gold rollout's agent stage takes a few seconds. */
const AGENT_TIMEOUT_SEC = 20;

/**
 * Which rollout's agent is signalled, and before which engine call answers
 * (0-based). On these easy tasks the gold script is one edit through the
 * harness's own editor, then submit: call 1 comes after the fix is in the
 * workspace (a test pins that script's length, so a change to it fails here
 * plainly rather than leaving a fault unfired).
 */
const FAULTS: Record<string, { signal: "SIGKILL" | "SIGSTOP"; atCall: number; status: "agent_error" | "timeout" }> = {
  "g0.r1": { signal: "SIGKILL", atCall: 0, status: "agent_error" },
  "g1.r0": { signal: "SIGSTOP", atCall: 1, status: "timeout" },
  "g2.r0": { signal: "SIGKILL", atCall: 1, status: "agent_error" },
  "g2.r1": { signal: "SIGSTOP", atCall: 0, status: "timeout" },
};

/** `g2.r0` of a trajectory id `RUN-g2-TASK.r0` (or an attempt id `….r0.1`). */
const faultKey = (id: string) => {
  const m = /-(g\d+)-.*\.(r\d+)(?:\.\d+)?$/.exec(id);
  return m ? `${m[1]}.${m[2]}` : "";
};

/** The host pid of the reference agent (`python3 …/agent.py`) in the agent container of attempt `rolloutId`. */
async function agentPid(rolloutId: string): Promise<number> {
  // The runner labels its containers with the attempt id plus its own attempt suffix (.1).
  const [c, ...more] = await dockerClient().listContainers({ filters: { label: [`${LABEL.rollout}=${rolloutId}.1`, `${LABEL.stage}=agent`] } });
  if (!c || more.length) throw new Error(`expected one agent container of ${rolloutId}, found ${more.length + (c ? 1 : 0)}`);
  const top = await dockerClient().getContainer(c.Id).top({ ps_args: "-o pid,args" });
  const agents = ((top.Processes ?? []) as string[][]).filter((p) => /^python3 \S*\/agent\.py /.test(p[1] ?? ""));
  if (agents.length !== 1) throw new Error(`expected one agent.py in ${rolloutId}'s container: ${JSON.stringify(top.Processes)}`);
  return Number(agents[0]![0]);
}

const work = mkdtempSync(join(tmpdir(), "lego-rollout-harness-faults-"));

describe("worker faults: the harness crashes or hangs", () => {
  let tasks: Task[];
  const rx = receiverFixture(work, async () => {
    tasks = (await openTaskSource("easy:seed=7,count=4", defaultTasksConfig())).tasks;
  });

  it("ends a crashed harness as agent_error and a hung one as timeout, never env_error or retried; every rollout once, nothing left", { timeout: 600_000 }, async () => {
    for (const t of tasks) expect(goldScript(await t.definition(), HARNESS_TOOLS.reference!.tools), t.id).toHaveLength(2);
    const signalled: string[] = [];
    const hookErrors: unknown[] = [];
    const launcher = scriptedLauncher({
      harness: "reference", name: "reference/scripted-gold", engineFor: () => "scripted-gold",
      limits: { maxTurns: 8, timeoutSec: AGENT_TIMEOUT_SEC },
      beforeCall: async (rolloutId, index) => {
        const fault = FAULTS[faultKey(rolloutId)];
        if (!fault || fault.atCall !== index || !rolloutId.endsWith(".1")) return;
        try {
          process.kill(await agentPid(rolloutId), fault.signal);
          signalled.push(faultKey(rolloutId));
        } catch (e) {
          hookErrors.push(e);
        }
      },
    });
    const runner = await RolloutRunner.create({ ...launcher.runner, concurrency: 2, maxAttempts: 1 });
    const events = new RolloutEvents();
    const seen: RolloutEvent[] = [];
    events.subscribe((e) => seen.push(e));
    const sender = new Sender({ address: rx.address, spoolDir: join(work, "tx"), producerId: "harness-faults" });
    let result;
    try {
      // Three attempts: an env_error would be retried, so a fault misread as one shows up as a retry.
      result = await runWorkerLoop(tasks, { runner, launcher, sink: sender, events }, {
        groupSize: 2, concurrency: 2, maxAttempts: 3, runId: "hfaults", routing: null, staleness: { maxStaleness: null },
      });
      await sender.drain(120_000);
    } finally {
      await runner.close();
      await sender.close();
    }
    expect(hookErrors).toEqual([]);
    expect(signalled.sort()).toEqual(Object.keys(FAULTS).sort());
    expect(result).toEqual({ groupsShipped: 4, groupsShippedBefore: 0, trajectoriesShipped: 8, droppedEnvErrors: 0 });
    expect(seen.filter((e) => e.kind === "rollout_retried")).toEqual([]);
    const finished = seen.flatMap((e) => (e.kind === "rollout_finished" ? [e] : []));
    expect(finished).toHaveLength(8);
    expect(Object.fromEntries(finished.map((f) => [faultKey(f.trajectoryId), f.status]))).toEqual({
      "g0.r0": "ok", "g0.r1": "agent_error", "g1.r0": "timeout", "g1.r1": "ok",
      "g2.r0": "agent_error", "g2.r1": "timeout", "g3.r0": "ok", "g3.r1": "ok",
    });

    // The receiver holds each rollout once: the faulted ones with reward 0 and their outcome, the rest graded 1.
    const received = receivedTrajectories(join(work, "rx"));
    expect(received.map((t) => t.trajectory_id).sort()).toEqual(finished.map((f) => f.trajectoryId).sort());
    for (const t of received) {
      const fault = FAULTS[faultKey(t.trajectory_id)];
      expect(t, t.trajectory_id).toMatchObject({ status: fault?.status ?? "ok", reward: fault ? 0 : 1, attempt: 0 });
      if (!fault) continue;
      // Every turn the engine answered is on the record, the one in flight too: the agent's death only
      // half-closes its connection at the in-container forwarder, and the proxy still writes the reply.
      expect(t.metrics.turns, t.trajectory_id).toBe(fault.atCall + 1);
      // A crash says how the harness ended (it had no chance to write to stderr); a timeout is its own status.
      expect(t.error).toBe(fault.status === "agent_error" ? "the agent exited with status 137" : null);
    }
    expect(await leftoverContainers()).toEqual([]);
  });
});
