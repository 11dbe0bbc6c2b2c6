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
