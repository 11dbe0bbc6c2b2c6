/** Pure rules (no Docker): protected paths, the file-set diff, verdict parsing. */
import { describe, expect, it } from "vitest";
import { parseVerdict } from "./verdict.ts";
import { ProtectedPaths, globToRegExp } from "./protected-paths.ts";
import { writesOutsideWorkspace } from "./stages.ts";
import type { TarEntry } from "./tar.ts";
import { diffWorkspace, snapshotOf } from "./workspace-files.ts";

const file = (path: string, text: string, mode = 0o644): TarEntry => ({ path: `workspace/${path}`, type: "file", content: Buffer.from(text), mode });

describe("protected paths", () => {
  const p = ProtectedPaths.forTask(["data/golden.json"]);
  it.each([
    "tests/test_calc.py", "pkg/tests/helpers.py", "test_x.py", "pkg/x_test.py", "conftest.py", "a/b/conftest.py",
    "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "sitecustomize.py", "lib/usercustomize.py",
    "evil.pth", "site/x.pth", ".github/workflows/ci.yml", ".gitlab-ci.yml", "data/golden.json",
  ])("protects %s", (path) => expect(p.matches(path)).toBe(true));
  it.each(["calc.py", "pkg/calc.py", "testing.py", "README.md", "data/other.json", "contest.py"])("leaves %s to the agent", (path) =>
    expect(p.matches(path)).toBe(false),
  );
  it.each(["tests/x\ny/conftest.py", "tests/x\u2028y/test_a.py", "a\nb/conftest.py", "a\rb/tests/data.txt"])(
    "protects %j: a line break in a folder name does not end a ** match",
    (path) => expect(p.matches(path)).toBe(true),
  );
  it("translates ** as zero or more segments", () => {
    expect(globToRegExp("**/a.py").test("a.py")).toBe(true);
    expect(globToRegExp("**/a.py").test("x/y/a.py")).toBe(true);
    expect(globToRegExp("*.py").test("x/a.py")).toBe(false);
  });
});

describe("workspace file set", () => {
  const pristine = snapshotOf([file("calc.py", "old"), file("tests/test_calc.py", "t"), file("gone.py", "x"), { ...file(".git/HEAD", "ref") }]);
  it("writes changed files, removes deleted ones, drops protected changes and .git", () => {
    const agent = snapshotOf([
      file("calc.py", "new"),
      file("tests/test_calc.py", "assert True"),
      file("conftest.py", "hook"),
      file("new.py", "n", 0o755),
      file(".git/HEAD", "other"),
    ]);
    const d = diffWorkspace(pristine, agent, ProtectedPaths.forTask([]));
    expect(d.write.map((f) => [f.path, f.content.toString(), f.mode])).toEqual([["calc.py", "new", 0o644], ["new.py", "n", 0o755]]);
    expect(d.remove).toEqual(["gone.py"]);
    expect(d.tampered).toEqual(["conftest.py", "tests/test_calc.py"]);
  });
  it("bytecode never travels: an agent's .pyc (which may run other code than its source) is dropped", () => {
    const agent = snapshotOf([file("calc.py", "old"), file("tests/test_calc.py", "t"), file("gone.py", "x"),
      file("__pycache__/calc.cpython-311.pyc", "evil"), file("pkg/helper.pyc", "evil")]);
    const d = diffWorkspace(pristine, agent, ProtectedPaths.forTask([]));
    expect(d).toEqual({ write: [], remove: [], tampered: [], escapingLinks: [] });
  });
  it("deleting a protected file is tampering too; links out of the workspace are dropped", () => {
    const agent = snapshotOf([
      file("calc.py", "old"),
      file("gone.py", "x"),
      { path: "workspace/up", type: "symlink", content: Buffer.alloc(0), mode: 0o777, linkname: "../etc/passwd" },
      { path: "workspace/in", type: "symlink", content: Buffer.alloc(0), mode: 0o777, linkname: "calc.py" },
    ]);
    const d = diffWorkspace(pristine, agent, ProtectedPaths.forTask([]));
    expect(d.tampered).toEqual(["tests/test_calc.py"]);
    expect(d.escapingLinks).toEqual(["up"]);
    expect(d.write.map((f) => [f.path, f.linkname])).toEqual([["in", "calc.py"]]);
  });

  it("a link that escapes through another link is dropped, however it normalises", () => {
    const link = (path: string, to: string): TarEntry => ({ path: `workspace/${path}`, type: "symlink", content: Buffer.alloc(0), mode: 0o777, linkname: to });
    const agent = snapshotOf([
      file("calc.py", "old"), file("tests/test_calc.py", "t"), file("gone.py", "x"),
      link("a/b/l1", "../.."), // the workspace root: inside
      link("a/b/l2", "l1/../../etc"), // lexically a/etc, really /etc
      link("a/b/l3", "l1/calc.py"), // calc.py: inside
      link("loop1", "loop2"), link("loop2", "loop1"), // never resolves
    ]);
    const d = diffWorkspace(pristine, agent, ProtectedPaths.forTask([]));
    expect(d.escapingLinks).toEqual(["a/b/l2", "loop1", "loop2"]);
    expect(d.write.map((f) => f.path)).toEqual(["a/b/l1", "a/b/l3"]);
  });

  it("a symlink in place of a directory that holds protected files is tampering", () => {
    const base = snapshotOf([file("calc.py", "old"), file("pkg/tests/test_a.py", "t"), file("tests/test_calc.py", "t")]);
    const link = (path: string, to: string): TarEntry => ({ path: `workspace/${path}`, type: "symlink", content: Buffer.alloc(0), mode: 0o777, linkname: to });
    const agent = snapshotOf([file("calc.py", "old"), link("pkg", "fake"), link("tests", "faketests"), file("faketests/test_calc.py", "assert True")]);
    const d = diffWorkspace(base, agent, ProtectedPaths.forTask([]));
    expect(d.tampered).toEqual(["faketests/test_calc.py", "pkg", "pkg/tests/test_a.py", "tests", "tests/test_calc.py"]);
    expect(d.write).toEqual([]);
  });
});

describe("writes outside the workspace", () => {
  it("ignores parents of a change and our mount points", () => {
    const changes = [
      { path: "/var", kind: "modified" }, { path: "/var/tmp", kind: "modified" }, { path: "/var/tmp/x", kind: "added" },
      { path: "/run", kind: "modified" }, { path: "/run/lego-audit", kind: "added" }, { path: "/workspace/a", kind: "added" },
    ];
    expect(writesOutsideWorkspace(changes, ["/run/lego-audit", "/tmp"])).toEqual(["/var/tmp/x"]);
  });
});

describe("verdict parsing", () => {
  const v = (nonce: string, exit: number) => JSON.stringify({ nonce, exit, timed_out: false, log_b64: "" });
  it("takes the last line with our nonce and ignores forgeries", () => {
    const out = `${v("forged", 0)}\nnoise\n${v("n1", 1)}\n`;
    expect(parseVerdict(out, "n1")?.exit).toBe(1);
    expect(parseVerdict(out, "n2")).toBeUndefined();
  });
});
