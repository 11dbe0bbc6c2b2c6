/**
 * `lego transport …`: send SPOOL --to ADDR, tap ADDR, stats SPOOL|ADDR.
 * Output is one JSON object per line, so scripts and CI can read it.
 */
import type { Argv } from "yargs";
import type { LegoCommand } from "../lego-command.ts";
import { Sender } from "./sender.ts";
import { isSpoolFolder, spoolStats, tapHeaders } from "./spool-stats.ts";

const print = (o: unknown) => process.stdout.write(`${JSON.stringify(o)}\n`);

export const transportCommand: LegoCommand = {
  command: "transport <command>",
  describe: "send spools, tap addresses, print data-plane stats",
  builder: (y: Argv) =>
    y
      .command(
        "send <spool>",
        "resend every batch of a sender spool to a receiver; acked batches leave the spool",
        (b) =>
          b
            .positional("spool", { type: "string", demandOption: true })
            .option("to", { type: "string", demandOption: true, describe: "receiver address (tcp://host:port, ipc://path)" })
            .option("producer", { type: "string", default: "lego-cli", describe: "producer id for batches sent from here" })
            .option("timeout-ms", { type: "number", default: 600_000, describe: "give up (batches stay spooled) after this long" }),
        async (a) => {
          const sender = new Sender({
            address: a.to as string, spoolDir: a.spool as string, producerId: a.producer as string,
            onEvent: (e) => (e.type === "acked" || e.type === "bad_frame" || e.type === "receiver_error" ? print(e) : undefined),
          });
          try {
            await sender.drain(a["timeout-ms"] as number);
          } finally {
            print({ event: "stats", ...sender.stats() });
            await sender.close();
          }
        },
      )
      .command(
        "tap <address>",
        "print each batch a receiver publishes on its tap address (receive --tap ADDR)",
        (b) =>
          b
            .positional("address", { type: "string", demandOption: true })
            .option("count", { type: "number", describe: "stop after this many batches" })
            .option("timeout-ms", { type: "number", default: 60_000, describe: "fail after this long without a batch" }),
        async (a) => {
          for await (const { header, received_at_ms } of tapHeaders(a.address as string, { count: a.count as number | undefined, timeoutMs: a["timeout-ms"] as number })) {
            print({ event: "batch", ...header, kind: undefined, latency_ms: received_at_ms - header.created_at_ms });
          }
        },
      )
      .command(
        "stats <target>",
        "count a spool folder, or measure a tap address's rates for --seconds",
        (b) =>
          b
            .positional("target", { type: "string", demandOption: true, describe: "spool folder or tap address" })
            .option("seconds", { type: "number", default: 10, describe: "how long to watch an address" }),
        async (a) => {
          const target = a.target as string;
          if (isSpoolFolder(target)) {
            print({ event: "spool", ...spoolStats(target) });
            return;
          }
          const started = Date.now();
          const totals = { batches: 0, trajectories: 0, tokens: 0, payload_bytes: 0 };
          const window = (a.seconds as number) * 1000;
          try {
            for await (const { header } of tapHeaders(target, { timeoutMs: window })) {
              totals.batches += 1;
              totals.trajectories += header.num_trajectories;
              totals.tokens += header.num_tokens;
              totals.payload_bytes += header.payload_bytes;
              if (Date.now() - started >= window) break;
            }
          } catch (error) {
            if (!(error instanceof Error && error.name === "TransportTimeoutError")) throw error;
          }
          const seconds = (Date.now() - started) / 1000;
          print({
            event: "rates", address: target, seconds, ...totals,
            batches_per_s: totals.batches / seconds, tokens_per_s: totals.tokens / seconds, mb_per_s: totals.payload_bytes / 1e6 / seconds,
          });
        },
      )
      .demandCommand(1),
  handler: () => undefined,
};
