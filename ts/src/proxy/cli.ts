/**
 * `lego proxy`: the proxy on its own, for trying a harness by hand or serving
 * a fixed set of sessions. In training the rollout worker embeds
 * `ProxyServer` and creates one session per rollout instead.
 *
 * Prints one JSON line per session ({session_id, base_url, secret}) on stdout
 * and serves until SIGINT/SIGTERM, then prints each session's record counts.
 * With `--records-out FILE` the records are written as they happen, one JSON
 * line each: `{"type":"turn", session_id, outcome, turn}` when a turn ends,
 * before its reply is sent (so a killed process loses nothing it has answered),
 * then `{"type":"session", ...records}` per session at exit. A usage error (a missing option, an
 * unreadable model directory) is one line on stderr and exit code 1.
 */
import { closeSync, openSync, readFileSync, writeSync } from "node:fs";
import type { Argv } from "yargs";
import type { LegoCommand } from "../lego-command.ts";
import { AffinityEngine, ScriptedEngine, SglangEngine, VllmEngine, ZmqEngine, type EngineClient, type ScriptedReply } from "../engine/index.ts";
import type { TurnListener } from "./capture/session-capture.ts";
import { loadProxyModel, type ProxyModel } from "./model.ts";
import { ProxyServer } from "./server.ts";
import { ModelFilesError } from "./tokenizer.ts";
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
  "max-tokens": number;
  "context-window"?: number;
  host: string;
  port: number;
  socket?: string;
  sessions: number;
  "records-out"?: string;
}

/** The command line asks for something that cannot be done as given; the message says what to change. */
class ProxyUsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProxyUsageError";
  }
}

export const proxyCommand: LegoCommand = {
  command: "proxy",
  describe: "serve the LLM proxy (OpenAI, Anthropic, Responses APIs) in front of an engine",
  builder: (y: Argv) =>
    y
      .option("model-dir", { type: "string", demandOption: true, describe: "directory with tokenizer.json and tokenizer_config.json (chat template)" })
      .option("engine", { choices: ["scripted", "vllm", "sglang", "zmq"] as const, default: "scripted" as const, describe: "engine behind the proxy (zmq: python -m lego_rl.engine)" })
      .option("engine-url", { type: "string", describe: "vLLM / SGLang server origin, e.g. http://127.0.0.1:8000" })
      .option("engine-address", { type: "string", describe: "zmq engine: the address it bound, e.g. tcp://127.0.0.1:5556 (or unix:///PATH on this host); several, comma-separated, are replicas with session affinity" })
      .option("engine-model", { type: "string", describe: "model name the vLLM server serves (zmq: the name the engine must serve)" })
      .option("script", { type: "string", describe: "scripted engine: JSON file with a list of replies ({text} or {token_ids})" })
      .option("served-model", { type: "string", array: true, default: ["*"], describe: "model names clients may request ('*' = any)" })
      .option("tool-call-format", { choices: ["qwen3_json", "qwen3_coder_xml"] as const, default: "qwen3_json" as const })
      .option("max-tokens", { type: "number", default: 8192, describe: "completion tokens when a request sets none, and the most a request gets" })
      .option("context-window", { type: "number", describe: "prompt + completion tokens the engine takes (default: what the engine reports, else the tokenizer config's)" })
      .option("host", { type: "string", default: "127.0.0.1" })
      .option("port", { type: "number", default: 0, describe: "0 picks a free port" })
      .option("socket", { type: "string", describe: "listen on this Unix socket instead of TCP" })
      .option("sessions", { type: "number", default: 1, describe: "sessions to create at start" })
      .option("records-out", { type: "string", describe: "append every turn as it ends, and every session's records at exit, as JSON lines here" }),
  handler: async (args) => {
    try {
      await serve(args as unknown as ProxyArgs);
    } catch (e) {
      if (!(e instanceof ProxyUsageError || e instanceof ModelFilesError)) throw e;
      console.error(`lego proxy: ${e.message}`);
      process.exitCode = 1;
    }
  },
};

async function serve(argv: ProxyArgs): Promise<void> {
  const positive = (name: "max-tokens" | "context-window") => {
    const v = argv[name];
    if (v !== undefined && !(Number.isInteger(v) && v > 0)) throw new ProxyUsageError(`--${name} must be a positive integer, got ${v}`);
  };
  positive("max-tokens");
  positive("context-window");
  const model = loadProxyModel(argv["model-dir"], { toolCallFormat: argv["tool-call-format"] });
  const records = argv["records-out"] ? openRecords(argv["records-out"]) : null;
  const engine = makeEngine(argv, model);
  // Written synchronously: the line is in the file before the turn's reply leaves.
  const onTurn: TurnListener = (e) => {
    if (records !== null) writeSync(records, `${toJsonLine({ type: "turn", ...e })}\n`);
  };
  const proxy = await ProxyServer.start(
    {
      model,
      engine,
      servedModels: argv["served-model"],
      maxTokens: argv["max-tokens"],
      ...(argv["context-window"] !== undefined ? { contextWindow: argv["context-window"] } : {}),
      onTurn,
    },
    argv.socket ? { socketPath: argv.socket } : { host: argv.host, port: argv.port },
  );
  const sessions = Array.from({ length: argv.sessions }, () => proxy.createSession());
  for (const s of sessions) console.log(JSON.stringify({ session_id: s.id, base_url: s.baseUrl, secret: s.secret }));
  await new Promise<void>((resolve) => {
    process.once("SIGINT", resolve);
    process.once("SIGTERM", resolve);
  });
  const closed = sessions.map((s) => proxy.closeSession(s.id));
  for (const r of closed) console.error(JSON.stringify({ session_id: r.session_id, turns: r.turns.length, segments: r.segments.length, audit: r.audit.length, side_threads: r.side_thread_ids }));
  if (records !== null) {
    for (const r of closed) writeSync(records, `${toJsonLine({ type: "session", ...r })}\n`);
    closeSync(records);
  }
  await proxy.close();
  await engine.close();
}

/** Opens `path` for the records (truncating it); a path that cannot be written is a usage error before anything is served. */
function openRecords(path: string): number {
  try {
    return openSync(path, "w");
  } catch (e) {
    throw new ProxyUsageError(`--records-out ${path}: ${(e as Error).message}`);
  }
}

/** JSON of records: typed arrays (token ids, logprobs, routing) as plain arrays. */
function toJsonLine(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => (ArrayBuffer.isView(v) ? Array.from(v as Uint8Array) : v));
}

function makeEngine(argv: ProxyArgs, model: ProxyModel): EngineClient {
  if (argv.engine === "scripted") {
    let script: ScriptedReply[] = [{ text: "This is the scripted engine: pass --script FILE for real replies." }];
    if (argv.script) {
      try {
        script = JSON.parse(readFileSync(argv.script, "utf8")) as ScriptedReply[];
      } catch (e) {
        throw new ProxyUsageError(`--script ${argv.script}: ${(e as Error).message}`);
      }
      if (!Array.isArray(script) || script.length === 0) throw new ProxyUsageError(`--script ${argv.script}: expected a non-empty JSON list of replies ({text} or {token_ids})`);
    }
    return new ScriptedEngine({ script: (call) => script[Math.min(call.index, script.length - 1)]!, encode: (t) => model.tokenizer.encode(t), endOfTurnId: model.codec.endOfTurnId });
  }
  if (argv.engine === "zmq") {
    const address = argv["engine-address"];
    if (!address) throw new ProxyUsageError("--engine zmq needs --engine-address (the endpoint python -m lego_rl.engine printed)");
    const replicas = address.split(",").map((a) => new ZmqEngine({ address: a.trim(), ...(argv["engine-model"] ? { model: argv["engine-model"] } : {}) }));
    return replicas.length === 1 ? replicas[0]! : new AffinityEngine(replicas);
  }
  const url = argv["engine-url"];
  if (!url) throw new ProxyUsageError(`--engine ${argv.engine} needs --engine-url`);
  if (argv.engine === "vllm") return new VllmEngine({ baseUrl: url, model: argv["engine-model"] ?? "default" });
  return new SglangEngine({ baseUrl: url });
}
