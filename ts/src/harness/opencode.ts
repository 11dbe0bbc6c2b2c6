/**
 * OpenCode (npm opencode-ai, its compiled binary), unmodified, from the mounted
 * harness runtime: `opencode run` headless, its JSON event stream on stdout,
 * pointed at the proxy session through an @ai-sdk/openai-compatible provider
 * (Chat Completions, streaming).
 *
 * Its global config folder is a root-owned folder under /opt/lego-harness: at
 * start OpenCode npm-installs @opencode-ai/plugin into every config folder it
 * can write (a network attempt offline), and skips one it cannot. The model
 * list fetch (models.dev), auto-update, sharing, default plugins and LSP
 * downloads are off; ripgrep comes from the runtime, so it is not downloaded.
 * Its own record is that JSON stream (`opencode run --format json`): a
 * `tool_use` event per finished tool part of the session, `text` events for
 * its answers.
 */
import type { AgentProgram, RuntimeMount, TaskDefinition } from "../sandbox/index.ts";
import { RUNTIMES_DIR } from "./claude-code.ts";
import type { FileTools } from "./file-touches.ts";
import { isObject, jsonLines, RECORD_MAX_BYTES, str, type HarnessRecordReader, type HarnessToolCall } from "./report.ts";
import { HARNESS_FILES_DIR, type Harness, type HarnessLimits, type HarnessSession } from "./types.ts";
import { join } from "node:path";

export const OPENCODE_VERSION = "1.18.33";

const DIR = HARNESS_FILES_DIR;
const RUNTIME = "/opt/lego-runtimes/harness";
const BIN = `${RUNTIME}/node_modules/opencode-linux-x64/bin/opencode`;
const PROVIDER = "lego";
const EVENTS = "/tmp/lego-opencode-events.jsonl";

/**
 * Its file tools name the file by `filePath`; its others (grep, glob, list)
 * name folders and patterns, which no edit matches, so they are left out.
 */
const FILE_TOOLS: FileTools = {
  paths: [
    { name: "read", path: "filePath", touch: "read" },
    { name: "edit", path: "filePath", touch: "edit" },
    { name: "write", path: "filePath", touch: "edit" },
  ],
  shells: [{ name: "bash", command: "command" }],
};

/** `run --format json` (1.18.33): `{type:"tool_use", part:{tool, state:{status: completed|error, input}}}`, `{type:"text", part:{text}}`. */
const record: HarnessRecordReader = {
  file: { path: EVENTS, maxBytes: RECORD_MAX_BYTES },
  parse(text) {
    const notes: string[] = [];
    const toolCalls: HarnessToolCall[] = [];
    let finalMessage: string | null = null;
    for (const e of jsonLines(text, notes)) {
      const part = isObject(e["part"]) ? e["part"] : {};
      if (e["type"] === "tool_use") {
        const state = isObject(part["state"]) ? part["state"] : {};
        const name = str(part["tool"]);
        if (name) toolCalls.push({ name, arguments: isObject(state["input"]) ? state["input"] : {}, ok: state["status"] === "completed" });
      } else if (e["type"] === "text" && str(part["text"]) !== null) finalMessage = str(part["text"]);
    }
    return { toolCalls, finalMessage, notes };
  },
};

/** The config OpenCode reads (XDG_CONFIG_HOME/opencode/opencode.json). */
export function openCodeConfig(session: HarnessSession, limits: HarnessLimits): Record<string, unknown> {
  const model = { name: session.model, ...(session.contextWindow !== null ? { limit: { context: session.contextWindow, output: Math.min(32_000, session.contextWindow) } } : {}) };
  return {
    provider: {
      [PROVIDER]: {
        npm: "@ai-sdk/openai-compatible",
        name: PROVIDER,
        // {file:…}: the key stays in its root-owned file, out of the config text.
        options: { baseURL: `${session.baseUrl}/v1`, apiKey: `{file:/${DIR}/secret}` },
        models: { [session.model]: model },
      },
    },
    model: `${PROVIDER}/${session.model}`,
    // Title generation runs on the same model: a side thread at the proxy.
    small_model: `${PROVIDER}/${session.model}`,
    autoupdate: false,
    share: "disabled",
    // Snapshots are a second git repository per session under XDG_DATA_HOME (undo); not needed headless.
    snapshot: false,
    lsp: false,
    formatter: false,
    permission: { "*": "allow", bash: "allow", edit: "allow", external_directory: "allow" },
    agent: { build: { steps: limits.maxTurns } },
  };
}

export function openCodeHarness(runtimesDir = RUNTIMES_DIR): Harness {
  return {
    name: "opencode",
    version: OPENCODE_VERSION,
    record,
    fileTools: FILE_TOOLS,
    runtimes: (): RuntimeMount[] => [{ name: "harness", hostPath: join(runtimesDir, "harness") }],
    program(def: TaskDefinition, session: HarnessSession, limits: HarnessLimits): AgentProgram {
      const file = (path: string, content: string) => ({ path: `${DIR}/${path}`, content: Buffer.from(content), mode: 0o444 });
      const env: Record<string, string> = {
        XDG_CONFIG_HOME: `/${DIR}/xdg-config`,
        XDG_DATA_HOME: "/tmp/lego-opencode/data",
        XDG_CACHE_HOME: "/tmp/lego-opencode/cache",
        XDG_STATE_HOME: "/tmp/lego-opencode/state",
        OPENCODE_DISABLE_MODELS_FETCH: "1",
        OPENCODE_DISABLE_AUTOUPDATE: "1",
        OPENCODE_DISABLE_SHARE: "1",
        OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
        OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
      };
      return {
        script: [
          // PATH is the sandbox's (its git shim first); ripgrep from the runtime is appended.
          `PATH="$PATH:${RUNTIME}/bin" exec ${BIN} run --pure --format json`,
          `-m '${PROVIDER}/${session.model}' --dir /workspace`,
          `"$(cat /${DIR}/instruction.md)"`,
          `> ${EVENTS}`,
        ].join(" "),
        env,
        files: [
          file("secret", session.secret),
          file("instruction.md", def.instruction),
          file("xdg-config/opencode/opencode.json", JSON.stringify(openCodeConfig(session, limits), null, 2)),
        ],
      };
    },
  };
}
