/** Test helpers of the rollout concern: the real Python receiver and what it spooled. */
import { spawnSync } from "node:child_process";
import { JsonLineProcess, PYTHON } from "../json-line-process.ts";

/** Starts `python -m lego_rl.transport receive` on a free port; resolves once it listens. */
export async function startReceiver(spool: string): Promise<{ receiver: JsonLineProcess; address: string }> {
  const receiver = new JsonLineProcess("receiver", PYTHON, ["-m", "lego_rl.transport", "receive", "--bind", "tcp://127.0.0.1:*", "--spool", spool]);
  const address = (await receiver.waitFor((e) => e.type === "listening", 30_000)).address as string;
  return { receiver, address };
}

/** The receiver's accepted batches as rows (pyarrow over the receiver's own spool files). */
export function receivedRows(spool: string): Record<string, unknown>[] {
  const script = `
import json, sys, pathlib, pyarrow as pa
from lego_rl.transport.spool_file import read_spool_file
for f in sorted(pathlib.Path(sys.argv[1], "batches").glob("*.lgrb")):
    rec = read_spool_file(f)
    t = pa.ipc.open_stream(rec.payload).read_all()
    for r in t.select(["trajectory_id", "group_id", "task_id", "harness", "status", "reward", "attempt", "error"]).to_pylist():
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
