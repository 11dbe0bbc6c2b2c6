/** `lego check`: run the preflight, print one line per check, exit 1 if any failed. */
import { homedir } from "node:os";
import { join } from "node:path";
import type { Argv } from "yargs";
import type { LegoCommand } from "../lego-command.ts";
import { preflight } from "./preflight.ts";

export const checkCommand: LegoCommand = {
  command: "check",
  describe: "preflight: Docker, harness runtimes, disk space, ports, tokenizer, chat template, engine routing, trainer, training job file; each failure names the fix",
  builder: (y: Argv) =>
    y
      .option("docker-socket", { type: "string", default: "/var/run/docker.sock" })
      .option("runtimes-dir", { type: "string", default: join(homedir(), ".cache", "lego-rl", "runtimes") })
      .option("work-dir", { type: "string", default: process.cwd() })
      .option("min-free-gib", { type: "number", default: 5 })
      .option("port", { type: "array", number: true, default: [] as number[], describe: "ports that must be free" })
      .option("model-dir", { type: "string", describe: "model directory (config.json, tokenizer.json, tokenizer_config.json): check tokenizer vs vocabulary and template vs tool-call parser" })
      .option("engine-address", { type: "string", describe: "Python engine (its ZeroMQ endpoint or unix:///PATH): probe that it returns MoE routing for routing replay" })
      .option("engine-url", { type: "string", describe: "vLLM origin: probe that it returns routed experts (--enable-return-routed-experts)" })
      .option("engine-model", { type: "string", describe: "model name the vLLM server serves (with --engine-url)" })
      .option("trainer-address", { type: "string", describe: "the trainer's data-plane receiver (its --receive address): probe that it answers a hello" })
      .option("engine-timeout-s", { type: "number", default: 60, describe: "how long the engine and trainer probes may take" })
      .option("config", { type: "string", describe: "training job file (FILE.toml, as `python -m lego_rl.cluster.train --config`): types, experts divisible by the expert-parallel size, placement-group bundles vs [hardware], memory per GPU, engines; no GPU needed" })
      .option("tool-call-format", { choices: ["qwen3_json", "qwen3_coder_xml"] as const, default: "qwen3_json" as const, describe: "the proxy's tool-call parser (as `lego proxy`)" }),
  handler: async (a) => {
    const results = await preflight({ dockerSocket: a["docker-socket"], runtimesDir: a["runtimes-dir"], workDir: a["work-dir"],
      minFreeGiB: a["min-free-gib"], ports: (a.port as number[]) ?? [], modelDir: a["model-dir"] ?? null, toolCallFormat: a["tool-call-format"],
      engine: a["engine-address"] ? { kind: "zmq", address: a["engine-address"] }
        : a["engine-url"] ? { kind: "vllm", baseUrl: a["engine-url"], model: a["engine-model"] ?? "default" } : null,
      engineTimeoutMs: a["engine-timeout-s"] * 1000, trainerAddress: a["trainer-address"] ?? null, jobConfig: a.config ?? null });
    for (const r of results) process.stdout.write(`${r.skipped ? "skip" : r.ok ? "ok  " : "FAIL"} ${r.name}: ${r.detail}${r.fix ? `\n     fix: ${r.fix}` : ""}\n`);
    if (results.some((r) => !r.ok)) process.exitCode = 1;
  },
};
