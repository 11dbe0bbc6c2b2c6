/** `lego transport stats` and `send` against a spool folder and a scripted receiver. */
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import yargs from "yargs";
import { Publisher, Router } from "zeromq";
import { decodeControl, encodeControl, type RoutingShape } from "../schema/index.ts";
import { transportCommand } from "./cli.ts";
import { Sender } from "./sender.ts";
import { replicate, syntheticTrajectory } from "./workload.ts";

const routing: RoutingShape = { layers: 2, top_k: 2, num_experts: 8 };
let dir: string;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), "lgt-cli-"));
});
afterEach(() => {
  vi.restoreAllMocks();
  rmSync(dir, { recursive: true, force: true });
});

async function run(args: string[]): Promise<Record<string, unknown>[]> {
  const lines: string[] = [];
  vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
    lines.push(String(chunk));
    return true;
  });
  await yargs(args).command(transportCommand).strict().fail((msg, err) => {
    throw err ?? new Error(msg);
  }).parseAsync();
  vi.restoreAllMocks();
  return lines.join("").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
}

async function spoolSome(spool: string, address: string): Promise<void> {
  const sender = new Sender({ address, spoolDir: spool, producerId: "w" });
  await sender.send(replicate(syntheticTrajectory("tpl", 100, routing), 6, "s"), routing);
  await sender.close();
}

describe("lego transport", () => {
  it("stats SPOOL counts batches, trajectories and tokens from the headers", async () => {
    const spool = join(dir, "tx");
    await spoolSome(spool, `ipc://${dir}/nobody.sock`);
    const [stats] = await run(["transport", "stats", spool]);
    expect(stats).toMatchObject({ event: "spool", batches: 1, trajectories: 6, tokens: 600, quarantined: 0 });
  });

  it("send SPOOL --to ADDR delivers the spool and empties it once acked", async () => {
    const spool = join(dir, "tx");
    const address = `ipc://${dir}/rx.sock`;
    await spoolSome(spool, `ipc://${dir}/nobody.sock`);
    const router = new Router({ linger: 0 });
    await router.bind(address);
    const receiver = (async () => {
      for await (const [peer, ...frames] of router) {
        const message = decodeControl(frames[0]!);
        if (message.kind === "heartbeat") {
          await router.send([peer!, encodeControl({ kind: "credit", receiver_id: "rx", credits: 4, max_batch_bytes: 1 << 26 })]);
        } else if (message.kind === "batch") {
          await router.send([peer!, encodeControl({ kind: "ack", batch_id: message.batch_id, status: "accepted", reason: null })]);
        }
      }
    })();
    const events = await run(["transport", "send", spool, "--to", address, "--timeout-ms", "10000"]);
    router.close();
    await receiver.catch(() => undefined);
    expect(events.at(-1)).toMatchObject({ event: "stats", accepted: 1, queued: 0, inFlight: 0 });
    expect(readdirSync(spool).filter((n) => n.endsWith(".lgrb"))).toEqual([]);
  });

  it("tap ADDR prints one JSON line per batch a receiver publishes", async () => {
    const spool = join(dir, "tx");
    await spoolSome(spool, `ipc://${dir}/nobody.sock`);
    const { readSpoolFile } = await import("./spool-file.ts");
    const file = readSpoolFile(join(spool, readdirSync(spool).find((n) => n.endsWith(".lgrb"))!));
    const address = `ipc://${dir}/tap.sock`;
    const publisher = new Publisher({ linger: 0 });
    await publisher.bind(address);
    // A live receiver publishes every batch it accepts; keep publishing until the tap has joined.
    const timer = setInterval(() => void publisher.send([file.headerBytes, file.payload]), 20);
    try {
      const events = await run(["transport", "tap", address, "--count", "2", "--timeout-ms", "20000"]);
      expect(events).toHaveLength(2);
      expect(events[0]).toMatchObject({ event: "batch", batch_id: file.header.batch_id, num_trajectories: 6 });
    } finally {
      clearInterval(timer);
      publisher.close();
    }
  });
});
