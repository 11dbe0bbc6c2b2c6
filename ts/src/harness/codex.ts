/**
 * Codex CLI (npm @openai/codex, its native binary), unmodified, from the
 * mounted harness runtime: `codex exec --json` headless, its JSONL event stream
 * on stdout, pointed at the proxy session's Responses endpoint through a custom
 * model provider (wire_api = "responses"). Its own sandbox (bubblewrap) and
 * approvals are off: the agent container is the sandbox. Update checks,
 * analytics and the features that reach the network at start (plugin and app
 * sync, which resolves github.com) are off.
 */
import { join } from "node:path";
import type { AgentProgram, RuntimeMount, TaskDefinition } from "../sandbox/index.ts";
import { RUNTIMES_DIR } from "./claude-code.ts";
import { HARNESS_FILES_DIR, type Harness, type HarnessLimits, type HarnessSession } from "./types.ts";

export const CODEX_VERSION = "0.171.0";

const DIR = HARNESS_FILES_DIR;
const BIN = "/opt/lego-runtimes/harness/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex";
const HOME = "/tmp/lego-codex";
/** Features on by default in 0.171.0 that sync from the network or add tools a coding task does not need. */
const FEATURES_OFF = ["plugins", "remote_plugin", "apps", "multi_agent", "goals", "image_generation", "browser_use", "computer_use", "in_app_updates"];

const str = (v: string) => JSON.stringify(v); // a TOML basic string is a JSON string for these values

/** $CODEX_HOME/config.toml. */
export function codexConfig(session: HarnessSession): string {
  return [
    `model = ${str(session.model)}`,
    `model_provider = "lego"`,
    `approval_policy = "never"`,
    `sandbox_mode = "danger-full-access"`,
    `check_for_update_on_startup = false`,
    `web_search = "disabled"`,
    ...(session.contextWindow !== null ? [`model_context_window = ${session.contextWindow}`] : []),
    "",
    "[model_providers.lego]",
    `name = "lego"`,
    `base_url = ${str(`${session.baseUrl}/v1`)}`,
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
    runtimes: (): RuntimeMount[] => [{ name: "harness", hostPath: join(runtimesDir, "harness") }],
    // Codex has no turn limit of its own in exec mode: the wall-clock limit bounds it.
    program(def: TaskDefinition, session: HarnessSession, _limits: HarnessLimits): AgentProgram {
      const file = (path: string, content: string) => ({ path: `${DIR}/${path}`, content: Buffer.from(content), mode: 0o444 });
      return {
        script: [
          // CODEX_HOME must be writable (its state databases); the config is copied there.
          `mkdir -p ${HOME}/tmp && cp /${DIR}/codex-config.toml ${HOME}/config.toml &&`,
          `LEGO_API_KEY="$(cat /${DIR}/secret)" exec ${BIN} exec --json --ephemeral --skip-git-repo-check`,
          "--dangerously-bypass-approvals-and-sandbox -C /workspace",
          `"$(cat /${DIR}/instruction.md)"`,
          "> /tmp/lego-codex-events.jsonl",
        ].join(" "),
        // TMPDIR: without it 0.171.0 writes under /var/tmp, outside the workspace and /tmp.
        env: { CODEX_HOME: HOME, TMPDIR: `${HOME}/tmp` },
        files: [file("secret", session.secret), file("instruction.md", def.instruction), file("codex-config.toml", codexConfig(session))],
      };
    },
  };
}
