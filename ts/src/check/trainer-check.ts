/**
 * `lego check --trainer-address`: the trainer's data-plane receiver answers a sender's hello
 * (a Heartbeat) with Credit, the first thing every rollout worker waits for (docs/transport.md).
 * The probe says hello as role "check" and waits for that Credit; the receiver only grants it a
 * credit window and remembers it among its (bounded) peers, so probing a live trainer is harmless.
 */
import { Dealer } from "zeromq";
import { decodeControl, encodeControl } from "../schema/index.ts";
import type { CheckResult } from "./preflight.ts";

export async function checkTrainer(address: string, timeoutMs: number): Promise<CheckResult> {
  const fix = "start the trainer with `--receive ADDR` (python -m lego_rl.trainer) and pass the address it prints as --trainer-address";
  const socket = new Dealer({ linger: 0, receiveTimeout: timeoutMs });
  try {
    socket.connect(address);
    await socket.send(encodeControl({ kind: "heartbeat", sender_id: "lego-check", role: "check", sent_at_ms: Date.now() }));
    let frames: Buffer[];
    try {
      frames = await socket.receive();
    } catch (e) {
      return { name: "trainer", ok: false, detail: `no answer from a receiver at ${address} within ${timeoutMs / 1000} s (${(e as Error).message})`, fix };
    }
    const reply = decodeControl(frames[0]!);
    if (reply.kind !== "credit")
      return { name: "trainer", ok: false, detail: `${address} answered a hello with ${reply.kind}, not credit: it is not a data-plane receiver`, fix };
    return { name: "trainer", ok: true, detail: `receiver ${reply.receiver_id} at ${address} grants ${reply.credits} credits, batches up to ${reply.max_batch_bytes} bytes` };
  } catch (e) {
    return { name: "trainer", ok: false, detail: `${address}: ${(e as Error).message}`, fix };
  } finally {
    socket.close();
  }
}
