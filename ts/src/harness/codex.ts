/**
 * Codex CLI (npm @openai/codex, its native binary), unmodified, from the
 * mounted harness runtime: `codex exec --json` headless, its JSONL event stream
 * on stdout, pointed at the proxy session's Responses endpoint through a custom
 * model provider (wire_api = "responses"). Its own sandbox (bubblewrap) and
 * approvals are off: the agent container is the sandbox. Update checks,
 * analytics and the features that reach the network at start (plugin and app
 * sync, which resolves github.com) are off. Its own record is that stream:
 * each `item.completed` event a command it ran (`command_execution`), a patch
 * its apply_patch engine applied (`file_change`) or its answer (`agent_message`).
 */
import { join } from "node:path";
import type { AgentProgram, RuntimeMount, TaskDefinition } from "../sandbox/index.ts";
import { RUNTIMES_DIR } from "./claude-code.ts";
import { applyPatchChanges } from "./codex-patch.ts";
import type { FileTools } from "./file-touches.ts";
import { isObject, jsonLines, list, RECORD_MAX_BYTES, str, type HarnessRecordReader, type HarnessToolCall } from "./report.ts";
import { HARNESS_FILES_DIR, type Harness, type HarnessLimits, type HarnessSession } from "./types.ts";

export const CODEX_VERSION = "0.171.0";

const DIR = HARNESS_FILES_DIR;
const BIN = "/opt/lego-runtimes/harness/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex";
const HOME = "/tmp/lego-codex";
/** Features on by default in 0.171.0 that sync from the network or add tools a coding task does not need. */
const FEATURES_OFF = ["plugins", "remote_plugin", "apps", "multi_agent", "goals", "image_generation", "browser_use", "computer_use", "in_app_updates"];

const toml = (v: string) => JSON.stringify(v); // a TOML basic string is a JSON string for these values
const EVENTS = "/tmp/lego-codex-events.jsonl";
const WORKSPACE = "/workspace";

/**
 * A POSIX shell line split into words (quotes and backslashes as sh reads
 * them): how Codex's `command_execution` items quote the command they ran
 * (`/bin/bash -lc "<cmd>"`). Null on an unterminated quote. One pass, linear.
 */
export function shellWords(line: string): string[] | null {
  const words: string[] = [];
  let word: string | null = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i]!;
    if (c === " " || c === "\t" || c === "\n") {
      if (word !== null) words.push(word);
      word = null;
    } else if (c === "'") {
      const end = line.indexOf("'", i + 1);
      if (end === -1) return null;
      word = (word ?? "") + line.slice(i + 1, end);
      i = end;
    } else if (c === '"') {
      word ??= "";
      for (i++; i < line.length && line[i] !== '"'; i++) {
        // In double quotes a backslash escapes only $ ` " \ and a newline (POSIX 2.2.3).
        if (line[i] === "\\" && i + 1 < line.length && '$`"\\\n'.includes(line[i + 1]!) && line[++i] === "\n") continue; // a line continuation
        word += line[i];
      }
      if (i >= line.length) return null;
    } else if (c === "\\") {
      if (i + 1 < line.length && line[i + 1] !== "\n") word = (word ?? "") + line[i + 1];
      i++;
    } else word = (word ?? "") + c;
  }
  if (word !== null) words.push(word);
  return words;
}

/** The script of a `bash -lc SCRIPT` command line as Codex reports it; the line itself when it is not one. */
function scriptOf(command: string): string {
  const w = shellWords(command);
  return w && w.length === 3 && /(^|\/)bash$/.test(w[0]!) && (w[1] === "-lc" || w[1] === "-c") ? w[2]! : command;
}

/** exec_command only: files are read by shell commands and changed by them or by its intercepted apply_patch. */
const FILE_TOOLS: FileTools = { paths: [], shells: [{ name: "exec_command", command: "cmd", applyPatch: true }] };

/** `exec --json` (0.171.0): `item.completed` events; a command's exit code, a patch's status. */
const record: HarnessRecordReader = {
  file: { path: EVENTS, maxBytes: RECORD_MAX_BYTES },
  parse(text) {
    const notes: string[] = [];
    const toolCalls: HarnessToolCall[] = [];
    let finalMessage: string | null = null;
    for (const e of jsonLines(text, notes)) {
      if (e["type"] !== "item.completed" || !isObject(e["item"])) continue;
      const item = e["item"];
      if (item["type"] === "command_execution" && str(item["command"]) !== null)
        toolCalls.push({ name: "exec_command", arguments: { cmd: scriptOf(str(item["command"])!) }, ok: item["exit_code"] === 0 });
      else if (item["type"] === "file_change") {
        const changes = list(item["changes"]).filter(isObject).map((c) => ({ path: str(c["path"]) ?? "", kind: str(c["kind"]) ?? "" }));
        changes.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
        toolCalls.push({ name: "apply_patch", arguments: { changes }, ok: item["status"] === "completed" });
      } else if (item["type"] === "agent_message" && str(item["text"]) !== null) finalMessage = str(item["text"]);
    }
    return { toolCalls, finalMessage, notes };
  },
  // The model's exec_command of `apply_patch <<'EOF'` is a file_change in the record; any other command, its `cmd` alone.
  asExecuted(call) {
    const cmd = str(call.arguments["cmd"]);
    if (call.name !== "exec_command" || cmd === null) return call;
    const changes = applyPatchChanges(cmd, WORKSPACE);
    return changes ? { name: "apply_patch", arguments: { changes } } : { name: "exec_command", arguments: { cmd } };
  },
};

/** $CODEX_HOME/config.toml. */
export function codexConfig(session: HarnessSession): string {
  return [
    `model = ${toml(session.model)}`,
    `model_provider = "lego"`,
    `approval_policy = "never"`,
    `sandbox_mode = "danger-full-access"`,
    `check_for_update_on_startup = false`,
    `web_search = "disabled"`,
    ...(session.contextWindow !== null ? [`model_context_window = ${session.contextWindow}`] : []),
    "",
    "[model_providers.lego]",
    `name = "lego"`,
    `base_url = ${toml(`${session.baseUrl}/v1`)}`,
    `env_key = "LEGO_API_KEY"`,
    `wire_api = "responses"`,
    "",
    "[analytics]",
    "enabled = false",
    "",
    "[features]",
    ...FEATURES_OFF.map((f) => `${f} = false`),
    "",
  ].join("\n");
}

export function codexHarness(runtimesDir = RUNTIMES_DIR): Harness {
  return {
    name: "codex",
    version: CODEX_VERSION,
    record,
    fileTools: FILE_TOOLS,
    runtimes: (): RuntimeMount[] => [{ name: "harness", hostPath: join(runtimesDir, "harness") }],
    // Codex has no turn limit of its own in exec mode: the wall-clock limit bounds it.
    program(def: TaskDefinition, session: HarnessSession, _limits: HarnessLimits): AgentProgram {
      const file = (path: string, content: string) => ({ path: `${DIR}/${path}`, content: Buffer.from(content), mode: 0o444 });
      return {
        script: [
          // CODEX_HOME must be writable (its state databases); the config is copied there.
          `mkdir -p ${HOME}/tmp && cp /${DIR}/codex-config.toml ${HOME}/config.toml &&`,
          `LEGO_API_KEY="$(cat /${DIR}/secret)" exec ${BIN} exec --json --ephemeral --skip-git-repo-check`,
          `--dangerously-bypass-approvals-and-sandbox -C ${WORKSPACE}`,
          `"$(cat /${DIR}/instruction.md)"`,
          `> ${EVENTS}`,
        ].join(" "),
        // TMPDIR: without it 0.171.0 writes under /var/tmp, outside the workspace and /tmp.
        env: { CODEX_HOME: HOME, TMPDIR: `${HOME}/tmp` },
        files: [file("secret", session.secret), file("instruction.md", def.instruction), file("codex-config.toml", codexConfig(session))],
      };
    },
  };
}
