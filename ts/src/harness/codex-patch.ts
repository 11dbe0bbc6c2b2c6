/**
 * Codex CLI's own patch format (its apply_patch: `*** Begin Patch`, `*** Add
 * File:` / `*** Delete File:` / `*** Update File:` sections, `@@` hunks of ` `,
 * `-`, `+` lines, `*** End Patch`) and how the model reaches it in 0.171.0.
 *
 * Why through the shell: 0.171.0 offers its apply_patch tool only as a
 * "freeform" (Responses `custom`) tool, and only for models whose metadata
 * says so — its model catalog accepts no other `apply_patch_tool_type` — while
 * the proxy serves function tools. What it does offer every model is the
 * interception of `apply_patch <<'EOF' … EOF` in its shell tool: the patch is
 * applied by its own apply_patch engine (verified, not run by bash) and its
 * event stream reports a `file_change` item, not a command.
 */
import type { GoldStep } from "./gold-edits.ts";

/** One gold step as a Codex patch; paths relative to the workspace (Codex resolves them against its cwd). */
export function codexPatch(step: GoldStep): string {
  const body = (() => {
    switch (step.kind) {
      case "create": {
        // Each line an added line; Codex ends the file with a newline whatever the patch says.
        const lines = step.content.endsWith("\n") ? step.content.slice(0, -1).split("\n") : step.content.split("\n");
        return [`*** Add File: ${step.path}`, ...(step.content === "" ? [] : lines.map((l) => `+${l}`))];
      }
      case "delete":
        return [`*** Delete File: ${step.path}`];
      case "replace":
        return [`*** Update File: ${step.path}`, "@@", ...step.lines.map((l) => `${l.op}${l.text}`)];
    }
  })();
  return ["*** Begin Patch", ...body, "*** End Patch"].join("\n");
}

/** The shell command Codex intercepts: the patch as a quoted heredoc (no expansion), its delimiter a line the patch does not hold. */
export function applyPatchCommand(patch: string): string {
  const lines = new Set(patch.split("\n"));
  let delim = "PATCH";
  for (let i = 1; lines.has(delim); i++) delim = `PATCH_${i}`;
  return `apply_patch <<'${delim}'\n${patch}\n${delim}`;
}

export interface PatchChange {
  path: string;
  kind: "add" | "delete" | "update";
}

/**
 * The files an `apply_patch <<'DELIM'` command changes, as Codex reports them
 * in a `file_change` item (absolute paths under `cwd`, sorted); null when the
 * command is not such a heredoc. Plain string scanning, no backtracking.
 */
export function applyPatchChanges(cmd: string, cwd: string): PatchChange[] | null {
  const head = "apply_patch <<'";
  if (!cmd.startsWith(head)) return null;
  const close = cmd.indexOf("'\n", head.length);
  if (close === -1) return null;
  const delim = cmd.slice(head.length, close);
  const tail = `\n${delim}`;
  const end = cmd.endsWith(`${tail}\n`) ? cmd.length - tail.length - 1 : cmd.endsWith(tail) ? cmd.length - tail.length : -1;
  if (end < close + 2) return null;
  const kinds: Array<[string, PatchChange["kind"]]> = [["*** Add File: ", "add"], ["*** Delete File: ", "delete"], ["*** Update File: ", "update"]];
  const changes: PatchChange[] = [];
  for (const line of cmd.slice(close + 2, end).split("\n")) {
    const hit = kinds.find(([prefix]) => line.startsWith(prefix));
    if (!hit) continue;
    const path = line.slice(hit[0].length).trim();
    changes.push({ path: path.startsWith("/") ? path : `${cwd}/${path}`, kind: hit[1] });
  }
  return changes.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}
