/**
 * The agent sees a single-commit repository: the task image's history (future
 * commits, branches, tags, reflogs, packed objects) is replaced by one commit
 * of the current tree, so `git log --all` or reflog hunting finds no fix.
 * Grading runs from the pristine image, whose .git is untouched, and `.git`
 * never travels in the agent's file set: the original history is back there.
 */
export const SANITIZE_GIT_SCRIPT = [
  "set -e",
  "cd /workspace",
  "[ -d .git ] || exit 0",
  // The agent owns /workspace, so it could have owned .git too; start from nothing.
  "rm -rf .git",
  "git init -q",
  "git add -A",
  "git -c core.hooksPath=/dev/null commit -q --no-verify -m 'task snapshot'",
].join("\n");
