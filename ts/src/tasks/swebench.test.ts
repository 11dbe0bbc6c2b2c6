/** SWE-bench-style JSONL: reading, writing, malformed input, and export → read back of any task. No Docker. */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadTask, type TaskDefinition } from "../sandbox/index.ts";
import { filesOfDir } from "../sandbox/tar.ts";
import { FIXTURES } from "../sandbox/test-support.ts";
import { TaskSourceError } from "./errors.ts";
import { exportHarbor, exportSweBench } from "./export.ts";
import { writeRepo } from "./git.ts";
import { openTaskSource } from "./sources.ts";
import { formatSweBenchJsonl, parseSweBenchJsonl, type SweBenchRecord } from "./swebench.ts";

const work = mkdtempSync(join(tmpdir(), "lego-swebench-"));
const cfg = { cacheDir: join(work, "cache"), sdistDir: join(work, "sdists"), repoRoots: [] };
afterAll(() => rmSync(work, { recursive: true, force: true }));

const RECORD: SweBenchRecord = {
  instance_id: "acme__calc-1",
  repo: "acme/calc",
  base_commit: "b".repeat(40),
  problem_statement: "add() subtracts.",
  patch: "diff --git a/calc.py b/calc.py\n",
  test_patch: "",
  FAIL_TO_PASS: ["tests/test_calc.py::test_add"],
  PASS_TO_PASS: ["tests/test_calc.py::test_sub", "tests/test_calc.py::test_param[a b]"],
  version: "1.0",
  environment_setup_commit: "a".repeat(40),
  created_at: "2024-01-01T00:00:00Z",
  hints_text: "",
};

function caught(f: () => unknown): TaskSourceError {
  let e: unknown;
  try {
    f();
  } catch (x) {
    e = x;
  }
  expect(e).toBeInstanceOf(TaskSourceError);
  return e as TaskSourceError;
}

describe("SWE-bench JSONL", () => {
  it("reads test lists given as JSON arrays or as JSON-encoded strings the same, and keeps every other field", () => {
    const asArrays = formatSweBenchJsonl([RECORD]);
    const asStrings = formatSweBenchJsonl([RECORD], { encodeLists: true });
    expect(asStrings).toContain('"FAIL_TO_PASS":"[\\"tests/test_calc.py::test_add\\"]"');
    expect(parseSweBenchJsonl(asArrays, "a.jsonl")).toEqual([RECORD]);
    expect(parseSweBenchJsonl(asStrings, "b.jsonl")).toEqual([RECORD]);
  });

  it("writes what it read byte for byte, SWE-bench fields first", () => {
    const text = formatSweBenchJsonl([RECORD, { ...RECORD, instance_id: "acme__calc-2", lego: { split: "test" } }]);
    expect(formatSweBenchJsonl(parseSweBenchJsonl(text, "t.jsonl"))).toBe(text);
    expect(Object.keys(JSON.parse(text.split("\n")[0]!)).slice(0, 10)).toEqual([
      "instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "version", "environment_setup_commit",
    ]);
  });

  it("names the file, line and field of malformed input", () => {
    const good = formatSweBenchJsonl([RECORD]);
    expect(caught(() => parseSweBenchJsonl(`${good}\n{not json\n`, "x.jsonl")).where).toBe("x.jsonl:3");
    const noRepo = JSON.stringify({ ...RECORD, repo: undefined });
    expect(caught(() => parseSweBenchJsonl(noRepo, "x.jsonl")).message).toBe("x.jsonl:1: repo: missing");
    const badList = JSON.stringify({ ...RECORD, PASS_TO_PASS: "[1, 2]" });
    expect(caught(() => parseSweBenchJsonl(badList, "x.jsonl")).field).toBe("PASS_TO_PASS");
    expect(caught(() => parseSweBenchJsonl(`${good}${good}`, "x.jsonl")).message).toContain("repeats line 1");
    expect(caught(() => parseSweBenchJsonl("[1]\n", "x.jsonl")).message).toContain("expected a JSON object");
  });

  it("says where it looked when a record's repository is not on this machine", async () => {
    const file = join(work, "lost.jsonl");
    writeFileSync(file, formatSweBenchJsonl([RECORD]));
    await expect(openTaskSource(file, cfg)).rejects.toThrow(/no local repository or archive for acme\/calc \(no network at run time\)/);
  });
});

/** A definition's content, without the cache paths it was materialised under. */
function contentOf(def: TaskDefinition) {
  const files = (dir: string) => filesOfDir(dir, "").map((f) => [f.path, f.content.toString("base64"), f.mode & 0o111]);
  return {
    name: def.name,
    instruction: def.instruction,
    config: def.config,
    schemaVersion: def.schemaVersion,
    metadata: def.metadata,
    toml: def.toml,
    environment: { kind: def.environment.kind, image: def.environment.image, files: files(def.environment.dir) },
    tests: files(def.testsDir),
    solution: def.solveScript ? readFileSync(def.solveScript, "utf8") : null,
    overlay: (def.overlay?.files ?? []).map((f) => [f.path, f.content.toString("utf8")]),
    grading: (def.overlay?.gradingFiles ?? []).map((f) => [f.path, f.content.toString("utf8")]),
  };
}

describe("export to SWE-bench JSONL and read back", () => {
  it("gives the same tasks for a generated family (records, repositories, overlays, verifiers)", async () => {
    const before = await openTaskSource("easy:seed=3,count=6", cfg);
    const out = join(work, "export-easy");
    expect(await exportSweBench(before.tasks, out)).toEqual({ records: 6, repos: 1 });
    const after = await openTaskSource(out, cfg);
    expect(after.tasks.map((t) => t.record)).toEqual(before.tasks.map((t) => t.record));
    for (let i = 0; i < 6; i++) {
      expect(contentOf(await after.tasks[i]!.definition())).toEqual(contentOf(await before.tasks[i]!.definition()));
    }
  });

  it("gives the same task for a Harbor directory, carried whole", async () => {
    const before = await openTaskSource(join(FIXTURES, "greet"), cfg);
    const out = join(work, "export-harbor-dir");
    await exportSweBench(before.tasks, out, { encodeLists: true });
    const after = await openTaskSource(join(out, "tasks.jsonl"), cfg);
    expect(after.tasks.map((t) => t.id)).toEqual(["greet"]);
    expect(contentOf(await after.tasks[0]!.definition())).toEqual(contentOf(await before.tasks[0]!.definition()));
  });

  it("lays the commits between environment and base over the image, and keeps the test patch for grading", async () => {
    const repo = join(work, "repos", "acme__calc");
    const files = (o: Record<string, string>) => new Map(Object.entries(o).map(([p, c]) => [p, { content: Buffer.from(c), executable: false }]));
    const [env, base] = writeRepo(repo, [
      { branch: "main", message: "env\n", files: files({ "calc.py": "def add(a, b):\n    return a + b\n", "tests/test_calc.py": "from calc import add\n" }) },
      { branch: "bug", message: "bug\n", parent: 0, files: files({ "calc.py": "def add(a, b):\n    return a - b\n" }) },
    ]);
    const testPatch = "diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n@@ -1 +1,5 @@\n from calc import add\n+\n+\n+def test_add():\n+    assert add(2, 3) == 5\n";
    const rec = { ...RECORD, base_commit: base!, environment_setup_commit: env!, test_patch: testPatch };
    const file = join(work, "repo-record.jsonl");
    writeFileSync(file, formatSweBenchJsonl([rec]));
    const def = await (await openTaskSource(file, { ...cfg, repoRoots: [join(work, "repos")] })).tasks[0]!.definition();
    expect(contentOf(def).overlay).toEqual([["calc.py", "def add(a, b):\n    return a - b\n"]]);
    expect(contentOf(def).grading).toEqual([["tests/test_calc.py", "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"]]);
    expect(readFileSync(join(def.testsDir, "named_tests.txt"), "utf8")).toBe("tests/test_calc.py::test_add\ntests/test_calc.py::test_sub\ntests/test_calc.py::test_param[a b]\n");
    const tar = execFileSync("tar", ["-tf", join(def.environment.dir, "repo.tar")], { encoding: "utf8" });
    expect(tar.split("\n").filter(Boolean).sort()).toEqual(["calc.py", "tests/", "tests/test_calc.py"]);
  });

  it("takes the repository from an archive named after the instance when there is no git repository", async () => {
    const src = join(work, "archive-src");
    mkdirSync(join(src, "pkg"), { recursive: true });
    writeFileSync(join(src, "pkg/mod.py"), "X = 1\n");
    const roots = join(work, "archives");
    mkdirSync(roots, { recursive: true });
    execFileSync("tar", ["-czf", join(roots, "acme__calc-1.tar.gz"), "-C", src, "pkg"]);
    mkdirSync(join(work, "elsewhere"));
    const file = join(work, "elsewhere", "archive-record.jsonl");
    writeFileSync(file, formatSweBenchJsonl([RECORD]));
    const t = (await openTaskSource(file, { ...cfg, repoRoots: [roots] })).tasks[0]!;
    expect(t.repo).toEqual({ kind: "archive", path: join(roots, "acme__calc-1.tar.gz") });
    const def = await t.definition();
    expect(filesOfDir(def.environment.dir, "").map((f) => f.path)).toEqual(["commit-message", "repo.tar.gz", "setup.sh"]);
    expect(def.overlay?.files).toEqual([]);
  });
});

describe("export to Harbor directories", () => {
  it("writes self-contained task folders that read back as Harbor 1.4 tasks with the overlay baked in", async () => {
    const set = await openTaskSource("easy:seed=3,count=2", cfg);
    const [dir] = await exportHarbor(set.tasks.slice(0, 1), join(work, "harbor-out"));
    const t = loadTask(dir!);
    const src = await set.tasks[0]!.definition();
    expect(t.name).toBe(set.tasks[0]!.id);
    expect(t.schemaVersion).toBe("1.4");
    expect(t.environment.kind).toBe("dockerfile");
    expect(readFileSync(join(dir!, "environment/Dockerfile"), "utf8")).toMatch(/^FROM lego-rl\/base\n/);
    const overlay = src.overlay!.files.map((f) => f.path).sort();
    expect(filesOfDir(join(dir!, "environment/overlay"), "").map((f) => f.path)).toEqual(overlay);
    expect((t.toml.lego as Record<string, unknown>).fail_to_pass).toEqual(set.tasks[0]!.failToPass);
  });
});
