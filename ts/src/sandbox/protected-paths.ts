/**
 * Paths in the workspace the agent may not change: the grader's own inputs.
 * Matched against workspace-relative posix paths with small globs:
 * `**` any number of path segments, `*` within one segment.
 */

/** Defaults; a task adds more with [lego] protected_paths in task.toml. */
export const DEFAULT_PROTECTED_PATHS: readonly string[] = [
  // tests and test data
  "tests/**",
  "test/**",
  "**/tests/**",
  "**/test_*.py",
  "**/*_test.py",
  "**/conftest.py",
  // test-runner configuration (pytest reads all of these)
  "pytest.ini",
  "tox.ini",
  "setup.cfg",
  "pyproject.toml",
  "noxfile.py",
  // interpreter start-up hooks: run code in every Python process, the grader's too
  "**/sitecustomize.py",
  "**/usercustomize.py",
  "**/*.pth",
  // CI definitions
  ".github/**",
  ".gitlab-ci.yml",
  ".circleci/**",
  ".travis.yml",
  "azure-pipelines.yml",
  "Jenkinsfile",
];

export function globToRegExp(glob: string): RegExp {
  let re = "";
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === "*" && glob[i + 1] === "*") {
      // "**/" matches zero or more whole segments; a trailing "**" matches the rest.
      if (glob[i + 2] === "/") {
        re += "(?:.*/)?";
        i += 2;
      } else {
        re += ".*";
        i += 1;
      }
    } else if (c === "*") re += "[^/]*";
    else if (c === "?") re += "[^/]";
    else re += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  // dotAll: without it `.` stops at a newline (or U+2028/U+2029), and a folder
  // named "x\ny" under tests/ would carry an unprotected conftest.py past `**`.
  return new RegExp(`^${re}$`, "s");
}

export class ProtectedPaths {
  private readonly res: RegExp[];

  constructor(readonly globs: readonly string[]) {
    this.res = globs.map(globToRegExp);
  }

  static forTask(extra: readonly string[]): ProtectedPaths {
    return new ProtectedPaths([...DEFAULT_PROTECTED_PATHS, ...extra]);
  }

  matches(relPath: string): boolean {
    return this.res.some((r) => r.test(relPath));
  }

  /**
   * True for a protected path and for any path whose subtree would hold one
   * (`tests` for `tests/**`): replacing such a directory with a file or a
   * symlink would swap out everything protected beneath it.
   */
  covers(relPath: string): boolean {
    return this.matches(relPath) || this.matches(`${relPath}/_`);
  }
}
