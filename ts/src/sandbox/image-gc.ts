/**
 * Collects our images by age and LRU: an image not asked for within
 * `maxAgeMs` goes, and of the rest only the `keep` most recently used task
 * images stay. The current base image and images a container still uses are
 * never removed (the daemon refuses the latter with 409; we skip it).
 */
import { baseImageTag } from "./base-image.ts";
import { dockerClient } from "./docker.ts";
import { daemonError } from "./errors.ts";
import { imageLastUsed } from "./image-state.ts";
import { LABEL, OWNER } from "./types.ts";

export interface ImageGcPolicy {
  maxAgeMs: number;
  /** Task images kept at most (most recently used first). */
  keep: number;
  /** Tags never removed (the current base by default). */
  pinned?: string[];
  /** Only consider tags matching this (e.g. one task's repository). */
  match?: RegExp;
  now?: number;
}

export interface ImageGcReport {
  removed: string[];
  kept: string[];
  inUse: string[];
}

export async function collectImages(policy: ImageGcPolicy): Promise<ImageGcReport> {
  const docker = dockerClient();
  const now = policy.now ?? Date.now();
  const pinned = new Set(policy.pinned ?? [baseImageTag()]);
  const usage = imageLastUsed();
  let images: Awaited<ReturnType<typeof docker.listImages>>;
  try {
    images = await docker.listImages({ filters: { label: [`${LABEL.owner}=${OWNER}`] } });
  } catch (e) {
    throw daemonError(e, "list images for GC");
  }
  const tagged = images.flatMap((img) =>
    (img.RepoTags ?? []).map((tag) => ({ tag, lastUsed: usage[tag] ?? img.Created * 1000, kind: img.Labels?.[LABEL.imageKind] })),
  );
  tagged.sort((a, b) => b.lastUsed - a.lastUsed);
  const report: ImageGcReport = { removed: [], kept: [], inUse: [] };
  let taskKept = 0;
  for (const img of tagged) {
    if (policy.match && !policy.match.test(img.tag)) continue;
    const old = now - img.lastUsed > policy.maxAgeMs;
    const overLimit = img.kind === "task" && taskKept >= policy.keep;
    if (pinned.has(img.tag) || (!old && !overLimit)) {
      if (img.kind === "task") taskKept++;
      report.kept.push(img.tag);
      continue;
    }
    try {
      await docker.getImage(img.tag).remove({ noprune: false });
      report.removed.push(img.tag);
    } catch (e) {
      const code = (e as { statusCode?: number }).statusCode;
      if (code === 409) report.inUse.push(img.tag);
      else if (code !== 404) throw daemonError(e, `remove image ${img.tag}`, { image: img.tag });
    }
  }
  return report;
}
