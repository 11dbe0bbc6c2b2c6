/**
 * The grading runner's checks on report records (in-container/grader_runner.py,
 * `judge`), run on this machine's python3 without Docker: records must come
 * in order, once, for collected tests only, never after the finish, and only
 * with a token the runner handed out.
 */
import { execFileSync } from "node:child_process";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const RUNNER_DIR = dirname(fileURLToPath(new URL("./in-container/grader_runner.py", import.meta.url)));
const TOKENS = ["t0", "t1"];

interface Judged {
  pytest: { sessions: number; finished: number; passed: number; failed: number; exit_ok: boolean };
  named: Record<string, string>;
  violations: string[];
}

/** Records of one session under token t0, numbered in the order given unless a record sets its own seq. */
function judge(records: Array<Record<string, unknown>>, named: string[] = [], raw: string[] = []): Judged {
  const lines = [...records.map((r, i) => JSON.stringify({ t: "t0", seq: i, ...r })), ...raw];
  const py = [
    "import json, sys",
    `sys.path.insert(0, ${JSON.stringify(RUNNER_DIR)})`,
    "import grader_runner as g",
    "a = json.load(sys.stdin)",
    "print(json.dumps(g.judge([l.encode() for l in a['lines']], a['tokens'], a['named'])))",
  ].join("\n");
  return JSON.parse(execFileSync("python3", ["-I", "-c", py], { input: JSON.stringify({ lines, tokens: TOKENS, named }) }).toString()) as Judged;
}

const start = { event: "start" };
const collected = (...nodeids: string[]) => ({ event: "collected", nodeids });
const phases = (nodeid: string, call = "passed") =>
  ["setup", "call", "teardown"].map((when) => ({ event: "test", nodeid, when, outcome: when === "call" ? call : "passed" }));
const finish = (exitstatus = 0) => ({ event: "finish", exitstatus });

describe("report records", () => {
  it("an honest session: outcomes per test, named tests resolved, no violation", () => {
    const j = judge([start, collected("a", "b"), ...phases("a"), ...phases("b", "failed"), finish(1)], ["a", "b", "c"]);
    expect(j).toEqual({
      pytest: { sessions: 1, finished: 1, passed: 1, failed: 1, exit_ok: false },
      named: { a: "passed", b: "failed", c: "missing" },
      violations: [],
      probes: [],
    });
  });

  it("refuses a record out of order, a second report of a phase, and a report for a test never collected", () => {
    const j = judge([start, collected("a"), ...phases("a"), { event: "test", nodeid: "a", when: "call", outcome: "passed" }, ...phases("zzz"), finish()]);
    expect(j.violations).toEqual(["session 0: second call report for 'a'", "session 0: report for 'zzz', which was not collected",
      "session 0: report for 'zzz', which was not collected", "session 0: report for 'zzz', which was not collected"]);
    expect(judge([start, { seq: 5, ...collected("a") }]).violations).toEqual(["session 0: record 5 where 1 was due"]);
  });

  it("refuses anything after the finish, unknown tokens and unreadable lines", () => {
    const j = judge([start, collected("a"), ...phases("a", "failed"), finish(1), { event: "test", nodeid: "a", when: "call", outcome: "passed" }], [], [
      JSON.stringify({ t: "guess", seq: 0, event: "finish", exitstatus: 0 }), "not json",
    ]);
    expect(j.violations).toEqual([
      "record with a token the runner never handed out",
      "unreadable record on the report pipe: b'not json'",
      "session 0: 'test' record after the session finished",
    ]);
  });

  it("status 0 with collected tests that never reported is refused; a non-zero stop (-x) just fails them", () => {
    expect(judge([start, collected("a", "b"), ...phases("a"), finish(0)]).violations).toEqual([
      "session 0: 1 collected tests never reported, yet the session finished with status 0",
    ]);
    const stopped = judge([start, collected("a", "b"), ...phases("a", "failed"), finish(1)], ["b"]);
    expect(stopped).toMatchObject({ pytest: { failed: 2 }, named: { b: "missing" }, violations: [] });
  });

  it("a named test passes only if it passed in every session that ran it", () => {
    const lines = [
      ...[start, collected("a"), ...phases("a"), finish()].map((r, i) => ({ ...r, seq: i })),
      ...[start, collected("a"), ...phases("a", "skipped"), finish()].map((r, i) => ({ ...r, seq: i, t: "t1" })),
    ];
    expect(judge(lines as never, ["a"]).named).toEqual({ a: "skipped" });
  });
});
