/** Harbor task directories as Harbor 0.26 writes them (task schema 1.4), and the errors for malformed ones. */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { TaskFormatError } from "./errors.ts";
import { DEFAULT_TASK_CONFIG, loadTask } from "./task.ts";
import { FIXTURES } from "./test-support.ts";

/** Every table and field Harbor 0.26's task template and TaskConfig model document, plus ours and some unknown ones. */
const HARBOR_1_4 = `schema_version = "1.4"
source = "https://example.org/tasks"
artifacts = ["/app/out.json"]

[task]
name = "acme/fix-parser"
version = "1.0.0"
description = "Fix the date parser"
keywords = ["parsing", "dates"]

[[task.authors]]
name = "Ada"
email = "ada@example.org"

[metadata]
author_name = "Ada"
author_email = "ada@example.org"
difficulty = "medium"
category = "debugging"
tags = ["python", "dates"]
expert_time_estimate_min = 10.0
junior_time_estimate_min = 30.0

[verifier]
timeout_sec = 90.0
env = { TZ = "UTC" }
user = "root"

[agent]
timeout_sec = 300
user = 1000

[environment]
build_timeout_sec = 450.0
docker_image = "acme/parser:1"
cpus = 2
memory_mb = 2048
storage_mb = 10240
gpus = 0
gpu_types = ["H100"]
allow_internet = false
skills_dir = "/skills"
env = { LANG = "C.UTF-8" }

[[environment.mcp_servers]]
name = "docs"
transport = "stdio"
command = "docs-server"
args = ["--offline"]

[solution]
env = { FAST = "1" }

[lego]
protected_paths = ["data/golden.json"]
needs_git_history = false
verdict_plugin = true
fail_to_pass = ["tests/test_dates.py::test_parse[2024-01-01]"]
pass_to_pass = ["tests/test_dates.py::test_format", 'tests/test_dates.py::test_tz["UTC"]']

[some_future_table]
anything = { nested = [1, 2, 3] }
`;

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function taskDir(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), "lego-harbor-"));
  dirs.push(dir);
  const all = {
    "instruction.md": "Fix it.\n",
    "environment/Dockerfile": "FROM lego-rl/base\n",
    "tests/test.sh": "#!/bin/bash\nexit 0\n",
    ...files,
  };
  for (const [rel, text] of Object.entries(all)) {
    mkdirSync(dirname(join(dir, rel)), { recursive: true });
    writeFileSync(join(dir, rel), text);
  }
  return dir;
}

/** The TaskFormatError loadTask throws, so its fields can be asserted (never asserting inside a catch). */
function formatError(dir: string): TaskFormatError {
  let caught: unknown;
  try {
    loadTask(dir);
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(TaskFormatError);
  return caught as TaskFormatError;
}

describe("a Harbor 0.26 task directory", () => {
  it("reads every documented field and acts on the timeouts and our [lego] section", () => {
    const dir = taskDir({ "task.toml": HARBOR_1_4, "solution/solve.sh": "#!/bin/bash\ntrue\n" });
    const t = loadTask(dir);
    expect(t.name).toBe("acme/fix-parser");
    expect(t.schemaVersion).toBe("1.4");
    expect(t.instruction).toBe("Fix it.\n");
    expect(t.config).toEqual({
      agentTimeoutSec: 300,
      verifierTimeoutSec: 90,
      buildTimeoutSec: 450,
      protectedPaths: ["data/golden.json"],
      needsGitHistory: false,
      verdictPlugin: true,
      failToPass: ["tests/test_dates.py::test_parse[2024-01-01]"],
      passToPass: ["tests/test_dates.py::test_format", 'tests/test_dates.py::test_tz["UTC"]'],
    });
    expect(t.environment).toEqual({ kind: "dockerfile", dir: join(dir, "environment") });
    expect(t.testsDir).toBe(join(dir, "tests"));
    expect(t.solveScript).toBe(join(dir, "solution/solve.sh"));
    expect(t.metadata).toEqual({
      author_name: "Ada",
      author_email: "ada@example.org",
      difficulty: "medium",
      category: "debugging",
      tags: ["python", "dates"],
      expert_time_estimate_min: 10,
      junior_time_estimate_min: 30,
    });
  });

  it("keeps fields it does not act on, unknown tables included", () => {
    const t = loadTask(taskDir({ "task.toml": HARBOR_1_4 }));
    expect(t.toml.artifacts).toEqual(["/app/out.json"]);
    expect((t.toml.task as Record<string, unknown>).authors).toEqual([{ name: "Ada", email: "ada@example.org" }]);
    expect((t.toml.verifier as Record<string, unknown>).env).toEqual({ TZ: "UTC" });
    expect((t.toml.environment as Record<string, unknown>).mcp_servers).toEqual([
      { name: "docs", transport: "stdio", command: "docs-server", args: ["--offline"] },
    ]);
    expect(t.toml.some_future_table).toEqual({ anything: { nested: [1, 2, 3] } });
  });

  it("takes defaults for what a minimal task.toml leaves out, and the folder's name", () => {
    const dir = taskDir({ "task.toml": 'schema_version = "1.4"\n' });
    const t = loadTask(dir);
    expect(t.config).toEqual(DEFAULT_TASK_CONFIG);
    expect(t.name).toBe(dir.split("/").pop());
    expect(t.solveScript).toBeUndefined();
  });

  it("reads the pre-1.1 spelling (version, [metadata] name) the built-in fixtures use", () => {
    const t = loadTask(join(FIXTURES, "fix-add"));
    expect(t.name).toBe("fix-add");
    expect(t.schemaVersion).toBe("1.0");
    expect(t.environment.kind).toBe("setup-script");
    expect(t.config.protectedPaths).toEqual(["calc_spec.txt"]);
  });
});

describe("a malformed Harbor task directory", () => {
  it("names the file, line and column of a TOML syntax error", () => {
    const e = formatError(taskDir({ "task.toml": 'schema_version = "1.4"\n[agent]\ntimeout_sec = = 3\n' }));
    expect(e.field).toBe("task.toml:3:15");
    expect(e.message).toMatch(/^task \/.+: task\.toml:3:15: /);
  });

  it("names the line of a value of the wrong type and what was expected", () => {
    const e = formatError(taskDir({ "task.toml": 'schema_version = "1.4"\n\n[verifier]\nenv = {}\ntimeout_sec = "soon"\n' }));
    expect(e.field).toBe("task.toml:5");
    expect(e.message).toContain('verifier.timeout_sec: expected a positive number of seconds, got "soon"');
  });

  it("refuses a non-positive timeout, a non-boolean switch and a non-string list", () => {
    expect(formatError(taskDir({ "task.toml": "[agent]\ntimeout_sec = 0\n" })).message).toContain("agent.timeout_sec");
    expect(formatError(taskDir({ "task.toml": "[lego]\nneeds_git_history = 1\n" })).message).toContain("lego.needs_git_history: expected true or false");
    expect(formatError(taskDir({ "task.toml": "[lego]\nprotected_paths = [1]\n" })).field).toBe("task.toml:2");
  });

  it("refuses a table written as a value and a schema major it does not know", () => {
    expect(formatError(taskDir({ "task.toml": 'agent = "fast"\n' })).message).toContain("agent: expected a table");
    const e = formatError(taskDir({ "task.toml": '# future\nschema_version = "2.0"\n' }));
    expect(e.field).toBe("task.toml:2");
    expect(e.message).toContain("only Harbor task schema 1.x");
  });

  it("says which required file is missing", () => {
    const dir = taskDir({ "task.toml": 'schema_version = "1.4"\n' });
    rmSync(join(dir, "tests"), { recursive: true });
    expect(formatError(dir).field).toBe("tests/test.sh");
    rmSync(join(dir, "environment/Dockerfile"));
    expect(formatError(dir).message).toContain("environment: needs a Dockerfile or a setup.sh");
  });
});
