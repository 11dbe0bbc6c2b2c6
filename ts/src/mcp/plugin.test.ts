/**
 * The Claude Code plugin manifest (.claude-plugin/plugin.json) against the format Claude Code's
 * plugins reference gives: `name` kebab-case, `version` MAJOR.MINOR.PATCH, `mcpServers` inline
 * with stdio servers ({command, args}) whose `${VAR}` references Claude Code expands from the
 * environment, `${CLAUDE_PLUGIN_ROOT}` being the plugin's folder (here the repository root).
 * The server it names is started exactly as written and answered by the official MCP client.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "../repo-root.ts";

interface StdioServer { command: string; args?: string[]; env?: Record<string, string> }
interface Manifest { name: string; version?: string; description?: string; mcpServers?: Record<string, StdioServer> }

/** `${VAR}` and `${VAR:-default}`, as Claude Code expands them in MCP server configs; an unset variable without default is an error. */
function expand(s: string, env: Record<string, string>): string {
  return s.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (_, name: string, dflt: string | undefined) => {
    const v = env[name] ?? dflt;
    if (v === undefined) throw new Error(`manifest references unset \${${name}}`);
    return v;
  });
}

const manifest = JSON.parse(readFileSync(join(REPO_ROOT, ".claude-plugin/plugin.json"), "utf8")) as Manifest;

describe("Claude Code plugin manifest", () => {
  it("has the fields and formats Claude Code validates on load", () => {
    expect(manifest.name).toMatch(/^[a-z][a-z0-9]*(-[a-z0-9]+)*$/);
    expect(manifest.version).toMatch(/^\d+\.\d+\.\d+$/);
    expect(typeof manifest.description).toBe("string");
    const servers = Object.entries(manifest.mcpServers ?? {});
    expect(servers.length).toBe(1);
    for (const [, s] of servers) {
      expect(typeof s.command).toBe("string");
      expect((s.args ?? []).every((a) => typeof a === "string")).toBe(true);
    }
  });

  it("starts the MCP server it names, which answers the official client with the run tools", { timeout: 60_000 }, async () => {
    const runDir = mkdtempSync(join(tmpdir(), "plugin-run-"));
    writeFileSync(join(runDir, "steps.jsonl"), JSON.stringify({ step: 1, "optim/lr": 0 }) + "\n");
    const env = { CLAUDE_PLUGIN_ROOT: REPO_ROOT, LEGO_RUN_DIR: runDir };
    const server = Object.values(manifest.mcpServers!)[0]!;
    const client = new Client({ name: "plugin-test", version: "0" });
    try {
      await client.connect(new StdioClientTransport({ command: expand(server.command, env), args: (server.args ?? []).map((a) => expand(a, env)) }));
      const tools = (await client.listTools()).tools.map((t) => t.name).sort();
      expect(tools).toEqual(["alerts", "metrics", "run_status", "trajectory"]);
      const r = await client.callTool({ name: "alerts", arguments: {} });
      expect(JSON.parse((r.content as { text: string }[])[0]!.text)).toMatchObject([{ kind: "lr_zero", at: 1 }]);
    } finally {
      await client.close();
      rmSync(runDir, { recursive: true, force: true });
    }
  });

  it("names the missing variable when LEGO_RUN_DIR is not set", () => {
    const server = Object.values(manifest.mcpServers!)[0]!;
    expect(() => (server.args ?? []).map((a) => expand(a, { CLAUDE_PLUGIN_ROOT: REPO_ROOT }))).toThrow("unset ${LEGO_RUN_DIR}");
  });
});
