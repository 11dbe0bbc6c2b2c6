/**
 * The sender as a specification, against a scripted receiver (a real ROUTER
 * socket in this process): hello, credits, acks, spool lifecycle, bad replies.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Router } from "zeromq";
import { decodeBatch, decodeControl, encodeControl, type ControlMessage, type RoutingShape } from "../schema/index.ts";
import { Sender, type SenderConfig } from "./sender.ts";
import { readSpoolFile } from "./spool-file.ts";
import { replicate, syntheticTrajectory } from "./workload.ts";

const routing: RoutingShape = { layers: 4, top_k: 2, num_experts: 8 };
const rows = (n: number, prefix = "t") => replicate(syntheticTrajectory("tpl", 300, routing), n, prefix);

let dir: string;
let router: Router;
let address: string;
const senders: Sender[] = [];

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), "lgt-ts-"));
  address = `ipc://${dir}/rx.sock`;
  router = new Router({ linger: 0 });
  await router.bind(address);
});

afterEach(async () => {
  for (const s of senders.splice(0)) await s.close();
  router.close();
  rmSync(dir, { recursive: true, force: true });
});

function open(config: Partial<SenderConfig> = {}): Sender {
  const sender = new Sender({ address, spoolDir: join(dir, "tx"), producerId: "w0", ...config });
  senders.push(sender);
  return sender;
}

/** Receives one message; returns the peer and its frames after the identity. */
async function next(): Promise<{ peer: Buffer; frames: Buffer[] }> {
  const [peer, ...frames] = await router.receive();
  return { peer: peer!, frames };
}

async function reply(peer: Buffer, message: ControlMessage | Uint8Array): Promise<void> {
  await router.send([peer, message instanceof Uint8Array ? message : encodeControl(message)]);
}

const credit = (credits: number): ControlMessage => ({ kind: "credit", receiver_id: "rx", credits, max_batch_bytes: 1 << 26 });
const ack = (batch_id: string, status = "accepted", reason: string | null = null): ControlMessage =>
  ({ kind: "ack", batch_id, status, reason }) as ControlMessage;
const spooled = () => readdirSync(join(dir, "tx")).filter((n) => n.endsWith(".lgrb"));

describe("Sender", () => {
  it("says hello on connecting and sends nothing until the receiver grants credit", async () => {
    const sender = open();
    const [header] = await sender.send(rows(2), routing);
    const hello = await next();
    expect(decodeControl(hello.frames[0]!)).toMatchObject({ kind: "heartbeat", sender_id: "w0", role: "sender" });
    expect(sender.stats()).toMatchObject({ sent: 0, queued: 1 });

    await reply(hello.peer, credit(1));
    const batch = await next();
    expect(decodeControl(batch.frames[0]!)).toEqual(header);
    const decoded = decodeBatch(batch.frames[1]!, "Trajectory");
    expect(decoded.rows.map((r) => r.trajectory_id)).toEqual(["t-0", "t-1"]);
  });

  it("keeps a batch spooled until it is acked, then deletes it", async () => {
    const sender = open();
    const [header] = await sender.send(rows(1), routing);
    expect(spooled()).toHaveLength(1);
    const { peer } = await next();
    await reply(peer, credit(4));
    await next();
    expect(spooled()).toHaveLength(1);
    await reply(peer, ack(header!.batch_id));
    await sender.drain(5000);
    expect(spooled()).toEqual([]);
    expect(sender.stats()).toMatchObject({ accepted: 1, sent: 1, inFlight: 0 });
  });

  it("moves a quarantined batch out of the resend path, with the receiver's reason", async () => {
    const sender = open();
    const [header] = await sender.send(rows(1), routing);
    const { peer } = await next();
    await reply(peer, credit(1));
    await next();
    await reply(peer, ack(header!.batch_id, "quarantined", "RecordShapeError: logprobs has 2 values for 3 tokens"));
    await sender.drain(5000);
    const quarantine = join(dir, "tx", "quarantine");
    const names = readdirSync(quarantine);
    expect(names.filter((n) => n.endsWith(".lgrb"))).toHaveLength(1);
    const reason = JSON.parse(readFileSync(join(quarantine, names.find((n) => n.endsWith(".reason.json"))!), "utf8"));
    expect(reason).toEqual({ batch_id: header!.batch_id, reason: "RecordShapeError: logprobs has 2 values for 3 tokens" });
    expect(spooled()).toEqual([]);
  });

  it("counts and survives replies it cannot read", async () => {
    const events: string[] = [];
    const sender = open({ onEvent: (e) => events.push(e.type) });
    const [header] = await sender.send(rows(1), routing);
    const { peer } = await next();
    await reply(peer, new Uint8Array([0xc1, 0x00]));
    await router.send([peer, Buffer.from("a"), Buffer.from("b")]);
    await reply(peer, { kind: "heartbeat", sender_id: "rx", role: "receiver", sent_at_ms: 1 }); // a kind a sender does not expect
    await reply(peer, credit(1));
    await next();
    await reply(peer, ack(header!.batch_id));
    await sender.drain(5000);
    expect(sender.stats().badFrames).toBe(3);
    expect(events.filter((e) => e === "bad_frame")).toHaveLength(3);
  });

  it("makes the producer wait once maxUnackedBatches are unacknowledged", async () => {
    const sender = open({ maxUnackedBatches: 2 });
    const headers = [...(await sender.send(rows(1, "a"), routing)), ...(await sender.send(rows(1, "b"), routing))];
    let third = false;
    const pending = sender.send(rows(1, "c"), routing).then(() => (third = true));
    const { peer } = await next();
    await reply(peer, credit(1));
    await next();
    expect(third).toBe(false);
    await reply(peer, ack(headers[0]!.batch_id));
    await pending;
    expect(third).toBe(true);
    expect(sender.unacked).toBe(2);
  });

  it("holds at most memoryHighWaterBytes of queued payloads and reads the rest back from the spool", async () => {
    const sender = open({ memoryHighWaterBytes: 30_000 });
    const headers = [];
    for (let i = 0; i < 5; i++) headers.push(...(await sender.send(rows(1, `m${i}`), routing)));
    expect(headers[0]!.payload_bytes).toBeGreaterThan(10_000);
    expect(sender.stats().peakHeldBytes).toBeLessThanOrEqual(30_000);
    const { peer } = await next();
    await reply(peer, credit(5));
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const batch = await next();
      ids.push(...decodeBatch(batch.frames[1]!, "Trajectory").rows.map((r) => r.trajectory_id));
    }
    expect(ids).toEqual(["m0-0", "m1-0", "m2-0", "m3-0", "m4-0"]);
  });

  it("resends what its spool holds when it starts again", async () => {
    const first = open();
    const headers = await first.send(rows(3), routing);
    await first.close();
    const second = open();
    expect(second.unacked).toBe(headers.length);
    // Answer every hello (the closed sender may have said one) until the resent batch arrives.
    let message = await next();
    while (message.frames.length === 1) {
      await reply(message.peer, credit(8));
      message = await next();
    }
    expect(decodeControl(message.frames[0]!)).toEqual(headers[0]);
  });
});

describe("policy version", () => {
  const announce = (version: number): ControlMessage =>
    ({ kind: "weight_version", version, published_at_ms: 1_700_000_000_000 + version, checkpoint_path: `/ckpt/v${version}` });

  it("exposes the newest version the receiver announces and wakes a worker waiting for it", async () => {
    const events: string[] = [];
    const sender = open({ onEvent: (e) => { if (e.type === "weight_version") events.push(`v${e.version}`); } });
    expect(sender.policyVersion).toBeNull();
    const hello = await next();
    const waiting = sender.waitForPolicyVersion(3, 5_000);
    await reply(hello.peer, announce(2));
    await reply(hello.peer, announce(3));
    await expect(waiting).resolves.toMatchObject({ kind: "weight_version", version: 3, checkpoint_path: "/ckpt/v3" });
    expect(sender.policyVersion?.version).toBe(3);
    // An older announcement (e.g. repeated on a reconnection) never moves it back.
    await reply(hello.peer, announce(1));
    await expect(sender.waitForPolicyVersion(2, 1_000)).resolves.toMatchObject({ version: 3 });
    expect(events).toEqual(["v2", "v3"]);
    expect(sender.stats().badFrames).toBe(0);
  });

  it("waitUntilTrained resolves only on an announcement after the batch's ack, a repeated version included", async () => {
    const sender = open();
    const hello = await next();
    await reply(hello.peer, credit(4));
    await reply(hello.peer, announce(1)); // before the batch: says nothing about it
    const [header] = await sender.send(rows(2), routing);
    const batch = await next();
    let done = false;
    const waiting = sender.waitUntilTrained([header!.batch_id], 5_000).then(() => { done = true; });
    await reply(batch.peer, ack(header!.batch_id));
    await new Promise((r) => setTimeout(r, 100));
    expect(done).toBe(false); // acked, but no step announced since
    await reply(batch.peer, announce(1)); // a step without an update announces the same version again
    await waiting;
    expect(done).toBe(true);
  });

  it("waitUntilTrained counts a quarantined batch as done, and times out naming what is missing", async () => {
    const sender = open();
    const hello = await next();
    await reply(hello.peer, credit(4));
    const [bad] = await sender.send(rows(1, "q"), routing);
    await next();
    await reply(hello.peer, ack(bad!.batch_id, "quarantined", "bad_count: test"));
    await expect(sender.waitUntilTrained([bad!.batch_id], 2_000)).resolves.toBeUndefined();
    const [header] = await sender.send(rows(1, "u"), routing);
    await next();
    await expect(sender.waitUntilTrained([header!.batch_id], 200)).rejects.toThrow(/no ack for w0-.* from .* within 200 ms/);
    await reply(hello.peer, ack(header!.batch_id));
    await expect(sender.waitUntilTrained([header!.batch_id], 300)).rejects.toThrow(/no policy version announced after the acks of .* \(is the trainer running\?\)/);
  });

  it("times out naming the version it waited for", async () => {
    const sender = open();
    const hello = await next();
    await reply(hello.peer, announce(1));
    await expect(sender.waitForPolicyVersion(5, 200)).rejects.toThrow(/policy version 5 .* \(version 1 so far\)/);
  });
});

describe("spool files", () => {
  it("start the payload on an 8-byte boundary and read back byte-identical", async () => {
    const sender = open();
    const [header] = await sender.send(rows(2), routing);
    const path = join(dir, "tx", spooled()[0]!);
    const file = readSpoolFile(path);
    expect(file.header).toEqual(header);
    expect(file.payload.byteOffset % 8).toBe(0);
    expect(decodeBatch(file.payload, "Trajectory").rows).toHaveLength(2);
    expect(existsSync(path)).toBe(true);
  });
});

describe("pooled IPC framing", () => {
  it("writes exactly the bytes encodeBatch writes, into reused buffers", async () => {
    const { encodeBatch, recordBatchOf } = await import("../schema/index.ts");
    const { PayloadPool, ScratchArena, frameInto } = await import("./ipc-frame.ts");
    const pool = new PayloadPool(1);
    const scratch = new ScratchArena();
    const batch = rows(3);
    const first = frameInto(recordBatchOf("Trajectory", batch, routing, { scratch: scratch.take }), pool);
    scratch.reset();
    expect(Buffer.from(first).equals(Buffer.from(encodeBatch("Trajectory", batch, routing)))).toBe(true);
    pool.release(first);
    const second = frameInto(recordBatchOf("Trajectory", batch.slice(0, 2), routing), pool);
    expect(second.buffer).toBe(first.buffer);
    expect(decodeBatch(second, "Trajectory").rows.map((r) => r.trajectory_id)).toEqual(["t-0", "t-1"]);
  });
});
