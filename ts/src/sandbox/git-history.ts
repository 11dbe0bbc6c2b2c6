/**
 * Git history the agent's code could mine for the fix, kept out of reach:
 *
 *  - at image build (`baseHistoryScript`), the task image's repository loses
 *    everything beyond its base commit (HEAD): with `needs_git_history =
 *    false` it becomes one commit of the base tree; with `true` it keeps the
 *    base's ancestry, and every ref that is not an ancestor of the base
 *    (future branches, tags, notes, stash), every reflog and every object no
 *    longer reachable is removed. Grading starts from this image, so the code
 *    under test, run by the verifier, finds no future there either;
 *  - in the agent stage (`SANITIZE_GIT_SCRIPT`), the agent always sees a
 *    single-commit repository of the current tree. `.git` never travels in
 *    the agent's file set.
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

/** Run as root in /workspace of a freshly built task image, before it is committed. */
export function baseHistoryScript(needsGitHistory: boolean): string {
  const common = ["set -eu", "cd /workspace", "[ -d .git ] || exit 0", 'owner=$(stat -c %u:%g .)'];
  const git = "git -c core.hooksPath=/dev/null";
  if (!needsGitHistory) {
    return [
      ...common,
      "rm -rf .git",
      "git init -q",
      "git add -A",
      `${git} commit -q --no-verify --allow-empty -m 'task base'`,
      'chown -R "$owner" .git',
    ].join("\n");
  }
  return [
    ...common,
    "base=$(git rev-parse --verify HEAD^{commit})",
    // Objects borrowed from elsewhere cannot be pruned here: copy what the base needs, drop the link.
    "if [ -s .git/objects/info/alternates ]; then git repack -a -d -q; rm -f .git/objects/info/alternates; fi",
    "git for-each-ref --format='%(refname)' | while read -r ref; do",
    '  c=$(git rev-parse --verify -q "$ref^{commit}" || true)',
    '  if [ -z "$c" ] || ! git merge-base --is-ancestor "$c" "$base"; then git update-ref -d "$ref"; fi',
    "done",
    "rm -f .git/ORIG_HEAD .git/FETCH_HEAD .git/MERGE_HEAD .git/CHERRY_PICK_HEAD .git/REVERT_HEAD",
    "rm -rf .git/refs/original .git/logs",
    "git reflog expire --expire=now --all",
    `${git} gc -q --prune=now`,
    'chown -R "$owner" .git',
  ].join("\n");
}
