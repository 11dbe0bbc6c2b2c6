/** How the grader turns the runner's verdict into a reward and flags (no Docker). */
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { TaskFormatError } from "./errors.ts";
import { decideReward, type RawVerdict } from "./verdict.ts";
import { loadTask, namedTests, type TaskConfig } from "./task.ts";
import { fixtureTask } from "./test-support.ts";

const base: TaskConfig = {
  agentTimeoutSec: 60, verifierTimeoutSec: 60, buildTimeoutSec: 600, protectedPaths: [], needsGitHistory: false, verdictPlugin: true, failToPass: [], passToPass: [],
};
const named: TaskConfig = { ...base, failToPass: ["t.py::test_fix"], passToPass: ["t.py::test_old"] };
const verdict = (over: Partial<RawVerdict> = {}): RawVerdict => ({
  nonce: "n", exit: 0, timed_out: false, leftover: 0, named: {}, violations: [], probes: [], log_b64: "",
  pytest: { sessions: 1, finished: 1, passed: 3, failed: 0, exitOk: true },
  ...over,
});
const decide = (config: TaskConfig, v: RawVerdict, fileReward?: number) => decideReward(config, v, { fileReward, forgedVerdictLine: false });

describe("reward from the verdict", () => {
  it("without named tests: exit 0 and a finished, all-passed pytest session is 1", () => {
    expect(decide(base, verdict())).toEqual({ reward: 1, flags: [] });
    expect(decide(base, verdict({ exit: 1 }))).toEqual({ reward: 0, flags: [] });
    expect(decide(base, verdict({ pytest: { sessions: 1, finished: 1, passed: 3, failed: 1, exitOk: false } })).reward).toBe(0);
  });

  it("with the plugin on, exit 0 without a finished session is 0 and flagged, never a pass on exit status", () => {
    expect(decide(base, verdict({ pytest: { sessions: 0, finished: 0, passed: 0, failed: 0, exitOk: true } }))).toEqual({ reward: 0, flags: ["unfinished_test_session"] });
    expect(decide(base, verdict({ pytest: { sessions: 2, finished: 1, passed: 3, failed: 0, exitOk: true } }))).toEqual({ reward: 0, flags: ["unfinished_test_session"] });
    // Without the plugin there is no report to miss: exit status it is.
    expect(decide({ ...base, verdictPlugin: false }, verdict({ pytest: { sessions: 0, finished: 0, passed: 0, failed: 0, exitOk: true } })).reward).toBe(1);
  });

  it("named tests: 1 only when every named test passed, whatever the exit status", () => {
    expect(decide(named, verdict({ exit: 1, named: { "t.py::test_fix": "passed", "t.py::test_old": "passed" } }))).toEqual({ reward: 1, flags: [] });
    for (const bad of ["failed", "error", "skipped", "missing"] as const) {
      expect(decide(named, verdict({ named: { "t.py::test_fix": bad, "t.py::test_old": "passed" } })).reward).toBe(0);
    }
    expect(decide(named, verdict({ named: { "t.py::test_fix": "passed" } })).reward).toBe(0);
  });

  it("refused records are tampering, processes that would not die a resource limit: both 0", () => {
    const allPassed = { "t.py::test_fix": "passed", "t.py::test_old": "passed" } as const;
    expect(decide(named, verdict({ named: allPassed, violations: ["session 0: second call report for 't.py::test_fix'"] }))).toEqual({ reward: 0, flags: ["grader_tampering"] });
    expect(decide(named, verdict({ named: allPassed, leftover: 2 }))).toEqual({ reward: 0, flags: ["resource_limit"] });
  });

  it("git run by the code under test is flagged for monitoring; the reward is unchanged", () => {
    expect(decide(base, verdict({ probes: ["git show fix:calc.py"] }))).toEqual({ reward: 1, flags: ["git_history_probe"] });
  });

  it("a reward file that disagrees is spoofing without named tests; with them it is not consulted", () => {
    expect(decide(base, verdict({ exit: 1 }), 1)).toEqual({ reward: 0, flags: ["grader_spoofing"] });
    expect(decide(named, verdict({ exit: 1, named: { "t.py::test_fix": "passed", "t.py::test_old": "passed" } }), 0).flags).toEqual([]);
  });
});

describe("named tests in task.toml", () => {
  it("slugify names its tests; fix-add names none", () => {
    expect(namedTests(fixtureTask("slugify").config)).toEqual([
      "test_hidden.py::test_collapses_runs_of_spaces", "test_hidden.py::test_strips_the_ends",
      "tests/test_slug.py::test_lowercases", "tests/test_slug.py::test_single_spaces",
    ]);
    expect(namedTests(fixtureTask("fix-add").config)).toEqual([]);
  });

  it("refuses named tests with the plugin off: nothing would report them", () => {
    const dir = mkdtempSync(join(tmpdir(), "lego-task-"));
    try {
      mkdirSync(join(dir, "environment"));
      mkdirSync(join(dir, "tests"));
      writeFileSync(join(dir, "environment/setup.sh"), "true\n");
      writeFileSync(join(dir, "tests/test.sh"), "true\n");
      writeFileSync(join(dir, "instruction.md"), "x\n");
      writeFileSync(join(dir, "task.toml"), '[lego]\nverdict_plugin = false\nfail_to_pass = ["t.py::test_a"]\n');
      expect(() => loadTask(dir)).toThrow(TaskFormatError);
      expect(() => loadTask(dir)).toThrow("lego.verdict_plugin");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
