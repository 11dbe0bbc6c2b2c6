/**
 * `lego proxy`: the proxy on its own, for trying a harness by hand or serving
 * a fixed set of sessions. In training the rollout worker embeds
 * `ProxyServer` and creates one session per rollout instead.
 *
 * Prints one JSON line per session ({session_id, base_url, secret}) on stdout,
 * serves until SIGINT/SIGTERM, then prints each session's record counts.
 */
import { readFileSync, writeFileSync } from "node:fs";
import type { Argv } from "yargs";
import type { LegoCommand } from "../cli/component.ts";
import { ScriptedEngine, type ScriptedReply } from "../engine/scripted.ts";
import { SglangEngine } from "../engine/sglang.ts";
import type { EngineClient } from "../engine/types.ts";
import { VllmEngine } from "../engine/vllm.ts";
import { AffinityEngine } from "../engine/affinity.ts";
import { ZmqEngine } from "../engine/zmq.ts";
import { loadProxyModel } from "./model.ts";
import { ProxyServer } from "./server.ts";
import type { ToolCallFormat } from "./tool-calls.ts";

interface ProxyArgs {
  "model-dir": string;
  engine: "scripted" | "vllm" | "sglang" | "zmq";
  "engine-url"?: string;
  "engine-address"?: string;
  "engine-model"?: string;
  script?: string;
  "served-model": string[];
  "tool-call-format": ToolCallFormat;
  host: string;
  port: number;
  socket?: string;
  sessions: number;
  "records-out"?: string;
}

export const proxyCommand: LegoCommand = {
  command: "proxy",
  describe: "serve the LLM proxy (OpenAI, Anthropic, Responses APIs) in front of an engine",
  builder: (y: Argv) =>
    y
      .option("model-dir", { type: "string", demandOption: true, describe: "directory with tokenizer.json and tokenizer_config.json (chat template)" })
      .option("engine", { choices: ["scripted", "vllm", "sglang", "zmq"] as const, default: "scripted" as const, describe: "engine behind the proxy (zmq: python -m lego_rl.engine)" })
      .option("engine-url", { type: "string", describe: "vLLM / SGLang server origin, e.g. http://127.0.0.1:8000" })
      .option("engine-address", { type: "string", describe: "zmq engine: the ZeroMQ endpoint it bound, e.g. tcp://127.0.0.1:5556; several, comma-separated, are replicas with session affinity" })
      .option("engine-model", { type: "string", describe: "model name the vLLM server serves (zmq: the name the engine must serve)" })
      .option("script", { type: "string", describe: "scripted engine: JSON file with a list of replies ({text} or {token_ids})" })
      .option("served-model", { type: "string", array: true, default: ["*"], describe: "model names clients may request ('*' = any)" })
      .option("tool-call-format", { choices: ["qwen3_json", "qwen3_coder_xml"] as const, default: "qwen3_json" as const })
      .option("host", { type: "string", default: "127.0.0.1" })
      .option("port", { type: "number", default: 0, describe: "0 picks a free port" })
      .option("socket", { type: "string", describe: "listen on this Unix socket instead of TCP" })
      .option("sessions", { type: "number", default: 1, describe: "sessions to create at start" })
      .option("records-out", { type: "string", describe: "write every session's records as JSON here on exit" }),
  handler: async (args) => {
    const argv = args as unknown as ProxyArgs;
    const model = loadProxyModel(argv["model-dir"], { toolCallFormat: argv["tool-call-format"] });
    const engine = makeEngine(argv, model);
    const proxy = await ProxyServer.start({ model, engine, servedModels: argv["served-model"] }, argv.socket ? { socketPath: argv.socket } : { host: argv.host, port: argv.port });
    const sessions = Array.from({ length: argv.sessions }, () => proxy.createSession());
    for (const s of sessions) console.log(JSON.stringify({ session_id: s.id, base_url: s.baseUrl, secret: s.secret }));
    await new Promise<void>((resolve) => {
      process.once("SIGINT", resolve);
      process.once("SIGTERM", resolve);
    });
    const records = sessions.map((s) => proxy.closeSession(s.id));
    for (const r of records) console.error(JSON.stringify({ session_id: r.session_id, turns: r.turns.length, segments: r.segments.length, audit: r.audit.length, side_threads: r.side_thread_ids }));
    if (argv["records-out"]) writeFileSync(argv["records-out"], JSON.stringify(records, (_k, v: unknown) => (ArrayBuffer.isView(v) ? Array.from(v as Uint8Array) : v)));
    await proxy.close();
    await engine.close();
  },
};

function makeEngine(argv: ProxyArgs, model: ReturnType<typeof loadProxyModel>): EngineClient {
  if (argv.engine === "scripted") {
    const script = argv.script ? (JSON.parse(readFileSync(argv.script, "utf8")) as ScriptedReply[]) : [{ text: "This is the scripted engine: pass --script FILE for real replies." }];
    return new ScriptedEngine({ script: (call) => script[Math.min(call.index, script.length - 1)]!, encode: (t) => model.tokenizer.encode(t), endOfTurnId: model.codec.endOfTurnId });
  }
  if (argv.engine === "zmq") {
    const address = argv["engine-address"];
    if (!address) throw new Error("--engine zmq needs --engine-address (the endpoint python -m lego_rl.engine printed)");
    const replicas = address.split(",").map((a) => new ZmqEngine({ address: a.trim(), ...(argv["engine-model"] ? { model: argv["engine-model"] } : {}) }));
    return replicas.length === 1 ? replicas[0]! : new AffinityEngine(replicas);
  }
  const url = argv["engine-url"];
  if (!url) throw new Error(`--engine ${argv.engine} needs --engine-url`);
  if (argv.engine === "vllm") return new VllmEngine({ baseUrl: url, model: argv["engine-model"] ?? "default" });
  return new SglangEngine({ baseUrl: url });
}
