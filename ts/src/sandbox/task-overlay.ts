/**
 * A task's workspace overlay (TaskDefinition.overlay): the files that make one
 * variant of a shared task image. Written into the agent container before the
 * git snapshot, and into the grading container before its pristine workspace
 * is compared with the agent's, so both sides see the same starting tree.
 */
import type { Sandbox } from "./container.ts";
import type { TarEntry, TarFile } from "./tar.ts";
import type { TaskDefinition } from "./task.ts";
import { AGENT_UID, WORKSPACE } from "./types.ts";

const AGENT = { uid: AGENT_UID, gid: AGENT_UID };

/** Writes the overlay's files into /workspace, owned by the agent user. */
export async function writeOverlay(sb: Sandbox, task: TaskDefinition): Promise<void> {
  const files = task.overlay?.files ?? [];
  if (files.length) await sb.putFiles(WORKSPACE, files.map((f) => ({ ...f, ...AGENT })), AGENT);
}

/** Writes the grading-only files (a test patch's result) root-owned, after the agent's change. */
export async function writeGradingFiles(sb: Sandbox, task: TaskDefinition): Promise<void> {
  const files = task.overlay?.gradingFiles ?? [];
  if (files.length) await sb.putFiles(WORKSPACE, files.map((f) => ({ ...f, uid: 0, gid: 0 })));
}

/** The image's pristine workspace with the overlay laid on: what the agent started from. */
export function withOverlay(pristine: Map<string, TarEntry>, task: TaskDefinition): Map<string, TarEntry> {
  const files = task.overlay?.files ?? [];
  if (!files.length) return pristine;
  const out = new Map(pristine);
  for (const f of files) out.set(f.path, overlayEntry(f));
  return out;
}

function overlayEntry(f: TarFile): TarEntry {
  return { path: `workspace/${f.path}`, type: "file", content: f.content, mode: f.mode };
}
