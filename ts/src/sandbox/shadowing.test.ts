/** Which written files shadow a module of the grading image (no Docker). */
import { describe, expect, it } from "vitest";
import { shadowingFiles } from "./shadowing.ts";
import type { TarEntry, TarFile } from "./tar.ts";

const names = new Set(["json", "pdb", "numpy", "calc_helpers_not", "pytest"]);
const entry = (path: string): [string, TarEntry] => [path, { path, type: "file", content: Buffer.from("x"), mode: 0o644 }];
const write = (...paths: string[]): TarFile[] => paths.map((path) => ({ path, content: Buffer.from("x"), mode: 0o644 }));
const pristine = new Map([entry("calc.py"), entry("pkg/__init__.py"), entry("pkg/core.py"), entry("src/lib/__init__.py"), entry("numpy.py")]);

describe("shadowed modules", () => {
  it("flags new top-level modules named like a standard or installed one, as files, packages or extensions", () => {
    expect(shadowingFiles(write("json.py", "pdb/__init__.py", "src/pytest.cpython-311-x86_64-linux-gnu.so", "calc.py"), pristine, [], names)).toEqual([
      "json.py", "pdb/__init__.py", "src/pytest.cpython-311-x86_64-linux-gnu.so",
    ]);
  });
  it("leaves modules inside a regular package, other names, and the repository's own modules", () => {
    expect(shadowingFiles(write("pkg/json.py", "src/lib/pdb.py", "helpers.py", "numpy.py", "notes/json.txt"), pristine, [], names)).toEqual([]);
  });
  it("a package made by adding __init__.py elsewhere does not hide a top-level shadow, and deleting one exposes it", () => {
    expect(shadowingFiles(write("__init__.py", "json.py"), pristine, [], names)).toEqual(["json.py"]);
    expect(shadowingFiles(write("pkg/json.py"), pristine, ["pkg/__init__.py"], names)).toEqual(["pkg/json.py"]);
  });
});
