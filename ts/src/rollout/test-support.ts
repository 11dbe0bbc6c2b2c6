/** Test helpers of the rollout concern: the real Python receiver and trainer, and what they spooled. */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, expect } from "vitest";
import { JsonLineProcess, PYTHON } from "../json-line-process.ts";
import { REPO_ROOT } from "../repo-root.ts";
import { ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";

/** Starts `python -m lego_rl.transport receive` on a free port; resolves once it listens. */
export async function startReceiver(spool: string): Promise<{ receiver: JsonLineProcess; address: string }> {
  const receiver = new JsonLineProcess("receiver", PYTHON, ["-m", "lego_rl.transport", "receive", "--bind", "tcp://127.0.0.1:*", "--spool", spool]);
  const address = (await receiver.waitFor((e) => e.type === "listening", 30_000)).address as string;
  return { receiver, address };
}

export interface ReceiverFixture {
  readonly receiver: JsonLineProcess;
  readonly address: string;
  /** WORK/rx, the receiver's spool. */
  readonly rxSpool: string;
}

/**
 * What most worker test files share: before their tests, the base image and a real receiver
 * spooling to WORK/rx (`setUp` runs first, in the same hook); after them, the receiver stopped,
 * no sandbox container left, WORK removed. Call it inside the `describe`.
 */
export function receiverFixture(work: string, setUp?: () => Promise<void>): ReceiverFixture {
  const rxSpool = join(work, "rx");
  let started: { receiver: JsonLineProcess; address: string } | undefined;
  beforeAll(async () => {
    await setUp?.();
    await ensureBaseImage();
    started = await startReceiver(rxSpool);
  }, IMAGE_BUILD_TIMEOUT_MS);
  afterAll(async () => {
    started?.receiver.stop();
    expect(await leftoverContainers()).toEqual([]);
    rmSync(work, { recursive: true, force: true });
  });
  const get = () => {
    if (!started) throw new Error("receiverFixture: read before its beforeAll started the receiver");
    return started;
  };
  return { get receiver() { return get().receiver; }, get address() { return get().address; }, rxSpool };
}

/** The receiver's accepted batches as rows (pyarrow over the receiver's own spool files). */
export function receivedRows(spool: string): Record<string, unknown>[] {
  const script = `
import json, sys, pathlib, pyarrow as pa
from lego_rl.transport.spool_file import read_spool_file
for f in sorted(pathlib.Path(sys.argv[1], "batches").glob("*.lgrb")):
    rec = read_spool_file(f)
    t = pa.ipc.open_stream(rec.payload).read_all()
    for r in t.select(["trajectory_id", "group_id", "task_id", "harness", "status", "reward", "attempt", "error", "stale", "min_policy_version", "trainer_version_at_ship"]).to_pylist():
        print(json.dumps({"batch_id": rec.header.batch_id, **r}))
`;
  const r = spawnSync(PYTHON, ["-c", script, spool], { encoding: "utf8", timeout: 60_000 });
  if (r.status !== 0) throw new Error(`reading the receiver spool failed: ${r.stderr}`);
  return r.stdout.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown>);
}

/** The real receiver with weight `version` published before any sender connects (announced on hello). */
export async function startVersionedTrainer(spool: string, version: number): Promise<{ receiver: JsonLineProcess; address: string }> {
  const script = `
import json, signal, sys, time
from pathlib import Path
from lego_rl.schema import WeightVersion
from lego_rl.transport.receiver import Receiver, ReceiverConfig
out = lambda e: (sys.stdout.write(json.dumps(e) + "\\n"), sys.stdout.flush())
rx = Receiver(ReceiverConfig(bind="tcp://127.0.0.1:*", spool_dir=Path(sys.argv[1]), on_event=out))
rx.publish_weight_version(WeightVersion(version=int(sys.argv[2]), published_at_ms=int(time.time() * 1000), checkpoint_path=None))
out({"type": "listening", "address": rx.address})
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
while not stop:
    b = rx.receive(timeout_s=0.2)
    if b is not None:
        rx.commit(b)
rx.close()
`;
  const receiver = new JsonLineProcess("trainer", PYTHON, ["-c", script, spool, String(version)]);
  const address = (await receiver.waitFor((e) => e.type === "listening", 30_000)).address as string;
  return { receiver, address };
}

/**
 * The real receiver as a trainer whose versions move during the run: it announces version 0
 * on start; SIGUSR1 makes it publish 1 and 2 at once, then one more every `periodMs` (faster
 * than a rollout finishes); SIGUSR2 makes it stop advancing. For every trajectory that arrives
 * it prints an `arrived` event: the record's version fields as Python decodes them, the
 * trainer's version at arrival, and why the trainer's own rule (`exclusion_reason`, with the
 * bound `maxStaleness`) would leave it out (null: it would train).
 */
export async function startAdvancingTrainer(spool: string, maxStaleness: number, periodMs: number): Promise<{ trainer: JsonLineProcess; address: string }> {
  const script = `
import json, signal, sys, time
from pathlib import Path
from lego_rl.schema import WeightVersion, batch_records
from lego_rl.trainer import exclusion_reason, outcome_of
from lego_rl.transport.receiver import Receiver, ReceiverConfig
out = lambda e: (sys.stdout.write(json.dumps(e) + "\\n"), sys.stdout.flush())
spool, bound, period = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000
rx = Receiver(ReceiverConfig(bind="tcp://127.0.0.1:*", spool_dir=spool, on_event=out))
state = {"version": 0, "advancing": False, "next": 0.0, "go": False, "stop": False}
def publish():
    rx.publish_weight_version(WeightVersion(version=state["version"], published_at_ms=time.time() * 1000, checkpoint_path=None))
    out({"type": "published", "version": state["version"]})
publish()
out({"type": "listening", "address": rx.address})
signal.signal(signal.SIGUSR1, lambda *_: state.update(go=True))
signal.signal(signal.SIGUSR2, lambda *_: state.update(advancing=False, go=False))
signal.signal(signal.SIGTERM, lambda *_: state.update(stop=True))
while not state["stop"]:
    if state["go"]:
        state.update(go=False, advancing=True, next=time.monotonic() + period)
        for _ in range(2):
            state["version"] += 1
            publish()
    if state["advancing"] and time.monotonic() >= state["next"]:
        state["version"] += 1
        state["next"] += period
        publish()
    b = rx.receive(timeout_s=0.02)
    if b is None:
        continue
    for t in batch_records(b.decoded):
        out({"type": "arrived", "trajectory_id": t.trajectory_id, "status": t.status, "reward": t.reward,
             "min_policy_version": t.min_policy_version, "max_policy_version": t.max_policy_version,
             "trainer_version_at_ship": t.trainer_version_at_ship, "stale": t.stale, "trainer_version": state["version"],
             "excluded": exclusion_reason(outcome_of(t), min_policy_version=state["version"] - bound)})
    rx.commit(b)
rx.close()
`;
  const trainer = new JsonLineProcess("trainer", PYTHON, ["-c", script, spool, String(maxStaleness), String(periodMs)]);
  const address = (await trainer.waitFor((e) => e.type === "listening", 30_000)).address as string;
  return { trainer, address };
}

/** One segment as the receiver holds it (what the trainer reads). */
export interface ReceivedSegment {
  thread: string;
  token_ids: number[];
  logprobs: number[];
  loss_mask: number[];
  turns: { completion_start: number; completion_end: number; policy_version: number }[];
}

/** One trajectory as the receiver holds it, with the batch header that carried it. */
export interface ReceivedTrajectory {
  producer_id: string;
  batch_id: string;
  trajectory_id: string;
  group_id: string;
  task_id: string;
  harness: string;
  status: string;
  reward: number | null;
  attempt: number;
  error: string | null;
  metrics: { turns: number; side_thread_turns: number };
  segments: ReceivedSegment[];
}

/** The receiver's accepted batches decoded by the Python schema package, segments and all. */
export function receivedTrajectories(spool: string): ReceivedTrajectory[] {
  const script = `
import json, sys, pathlib
from lego_rl.schema import batch_records, decode_batch
from lego_rl.transport.spool_file import read_spool_file
for f in sorted(pathlib.Path(sys.argv[1], "batches").glob("*.lgrb")):
    rec = read_spool_file(f)
    for t in batch_records(decode_batch(rec.payload, expect="Trajectory")):
        print(json.dumps({
            "producer_id": rec.header.producer_id, "batch_id": rec.header.batch_id,
            "trajectory_id": t.trajectory_id, "group_id": t.group_id, "task_id": t.task_id, "harness": t.harness,
            "status": t.status, "reward": t.reward, "attempt": t.attempt, "error": t.error,
            "metrics": {"turns": t.metrics.turns, "side_thread_turns": t.metrics.side_thread_turns},
            "segments": [{
                "thread": s.thread, "token_ids": s.token_ids.tolist(), "logprobs": s.logprobs.tolist(), "loss_mask": s.loss_mask.tolist(),
                "turns": [{"completion_start": u.completion_start, "completion_end": u.completion_end, "policy_version": u.policy_version} for u in s.turns],
            } for s in t.segments],
        }))
`;
  const r = spawnSync(PYTHON, ["-c", script, spool], { encoding: "utf8", timeout: 60_000, maxBuffer: 1 << 28 });
  if (r.status !== 0) throw new Error(`reading the receiver spool failed: ${r.stderr}`);
  return r.stdout.trim().split("\n").filter(Boolean).map((l) => JSON.parse(l) as ReceivedTrajectory);
}

/**
 * Starts `python -m lego_rl.trainer --receive` (the receiver and a GSPO step
 * per batch, single process) on the model in `model`; resolves once it says
 * where it receives (bounded). It exits by itself after `maxSteps` steps.
 */
export async function startTrainer(opts: { model: string; work: string; maxSteps: number }): Promise<{ proc: ChildProcess; address: string; stderr: () => string; rxSpool: string; stepLog: string }> {
  const rxSpool = `${opts.work}/rx`;
  const stepLog = `${opts.work}/steps.jsonl`;
  const proc = spawn(PYTHON, [
    "-m", "lego_rl.trainer", "--model", opts.model, "--checkpoints", `${opts.work}/ckpt`, "--receive", "tcp://127.0.0.1:*",
    "--receiver-spool", rxSpool, "--max-steps", String(opts.maxSteps), "--log", stepLog, "--threads", "1",
  ], { cwd: REPO_ROOT, stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  const address = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`the trainer did not say where it receives within 180 s: ${err.slice(-2000)}`)), 180_000);
    createInterface({ input: proc.stderr! }).on("line", (l) => {
      err += `${l}\n`;
      const m = /^trainer: receiving on (\S+)/.exec(l);
      if (m) {
        clearTimeout(timer);
        res(m[1]!);
      }
    });
    proc.on("exit", (code) => {
      clearTimeout(timer);
      rej(new Error(`the trainer exited (${code}) before receiving: ${err.slice(-2000)}`));
    });
  });
  return { proc, address, stderr: () => err, rxSpool, stepLog };
}
