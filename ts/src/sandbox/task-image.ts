/**
 * Task images, built on the local base image from a task's environment/:
 *  - a Dockerfile whose FROM names `lego-rl/base` (any tag: we pin it to the
 *    current base hash), built with networking off and pull off, so a build
 *    can never reach a registry;
 *  - or a setup.sh run as root in a network-less container, then committed.
 * The tag hashes the recipe version, the base tag and the environment tree,
 * so an unchanged task is one `image inspect` away.
 */
import { baseImageTag, imageExists, type BuildLog } from "./base-image.ts";
import { Sandbox } from "./container.ts";
import { dockerClient, followProgress } from "./docker.ts";
import { SandboxEnvError, TaskFormatError, daemonError } from "./errors.ts";
import { hashTree } from "./hash.ts";
import { buildLockPath, withHostLock } from "./host-lock.ts";
import { quarantined, touchImage } from "./image-state.ts";
import { baseHistoryScript } from "./git-history.ts";
import { filesOfDir, packFiles } from "./tar.ts";
import type { TaskDefinition } from "./task.ts";
import { LABEL, OWNER, WORKSPACE } from "./types.ts";

/** A built (or cached) task image. */
export interface TaskImage {
  tag: string;
  task: string;
  cached: boolean;
  buildMs: number;
}

/** task-v2: the repository's history is cut back to the base commit at build (git-history.ts). */
const RECIPE_VERSION = "task-v2";

function repoName(task: string): string {
  return `lego-rl/task-${task.toLowerCase().replace(/[^a-z0-9._-]/g, "-")}`;
}

export function taskImageTag(task: TaskDefinition, baseTag = baseImageTag()): string {
  const h = hashTree(task.environment.dir);
  h.update(`\0${RECIPE_VERSION}\0${baseTag}\0${task.environment.kind}\0history=${task.config.needsGitHistory}`);
  return `${repoName(task.environment.image ?? task.name)}:${h.digest("hex").slice(0, 16)}`;
}

/** Pins every `FROM lego-rl/base[:tag]` to `baseTag`; any other FROM would need a registry. */
export function pinDockerfile(text: string, baseTag: string, taskDir: string): string {
  return text
    .split("\n")
    .map((line) => {
      const m = /^\s*FROM\s+(\S+)(.*)$/i.exec(line);
      if (!m) return line;
      if (!/^lego-rl\/base(:\S+)?$/.test(m[1]!)) {
        throw new TaskFormatError(taskDir, "environment/Dockerfile", `FROM ${m[1]}: only lego-rl/base is available (no registry)`);
      }
      return `FROM ${baseTag}${m[2]}`;
    })
    .join("\n");
}

export interface EnsureTaskImageOptions {
  log?: BuildLog;
  /** The health check builds and runs quarantined images; rollouts must not. */
  allowQuarantined?: boolean;
}

export async function ensureTaskImage(
  task: TaskDefinition,
  baseTag = baseImageTag(),
  opts: EnsureTaskImageOptions = {},
): Promise<TaskImage> {
  const t0 = performance.now();
  const log = opts.log ?? (() => {});
  const tag = taskImageTag(task, baseTag);
  const q = opts.allowQuarantined ? undefined : quarantined(tag);
  if (q) {
    throw new SandboxEnvError("image_build_failed", `image is quarantined since ${q.at}: ${q.reason}`, { task: task.name, image: tag },
      "fix the task, then run `lego sandbox check` on it");
  }
  touchImage(tag);
  if (await imageExists(tag)) return { tag, task: task.name, cached: true, buildMs: performance.now() - t0 };
  if (!(await imageExists(baseTag))) {
    throw new SandboxEnvError("image_build_failed", `base image ${baseTag} is missing`, { task: task.name, image: tag },
      "run `lego sandbox build-base` first");
  }
  // One build per tag on this machine; a process that waited finds it built.
  return withHostLock(buildLockPath(tag), async () => {
    if (await imageExists(tag)) return { tag, task: task.name, cached: true, buildMs: performance.now() - t0 };
    if (task.environment.kind === "dockerfile") await buildFromDockerfile(task, baseTag, tag, log);
    else await buildFromSetupScript(task, baseTag, tag, log);
    return { tag, task: task.name, cached: false, buildMs: performance.now() - t0 };
  });
}

async function buildFromDockerfile(task: TaskDefinition, baseTag: string, tag: string, log: BuildLog): Promise<void> {
  const files = filesOfDir(task.environment.dir, "");
  const df = files.find((f) => f.path === "Dockerfile")!;
  df.content = Buffer.from(pinDockerfile(df.content.toString("utf8"), baseTag, task.dir));
  const context = await packFiles(files);
  const docker = dockerClient();
  try {
    const stream = await docker.buildImage(context as never, {
      t: tag,
      networkmode: "none",
      pull: false,
      rm: true,
      forcerm: true,
      labels: JSON.stringify({ [LABEL.owner]: OWNER, [LABEL.imageKind]: "task", [LABEL.task]: task.name }),
    } as never);
    for (const line of await followProgress(docker, stream)) log(line.trimEnd());
  } catch (e) {
    throw new SandboxEnvError("image_build_failed", `docker build: ${(e as Error).message}`, { task: task.name, image: tag },
      "read the build log; the Dockerfile must not need the network", { cause: e });
  }
  // The built image still holds the repository's whole history: cut it back and commit over the tag.
  const sb = await Sandbox.start({ image: tag, rolloutId: `build-${task.name}`, stage: "build", profile: "build" });
  try {
    await cutHistory(sb, task, tag);
    await commitTaskImage(sb, task, tag);
  } finally {
    await sb.remove();
  }
}

/** No history beyond the base commit in the image (see git-history.ts). */
async function cutHistory(sb: Sandbox, task: TaskDefinition, tag: string): Promise<void> {
  const r = await sb.exec(["bash", "-c", baseHistoryScript(task.config.needsGitHistory)], { user: "0", timeoutMs: 600_000 });
  if (r.exitCode !== 0) {
    throw new SandboxEnvError("image_build_failed", `cutting git history back to the base commit exited ${r.exitCode}: ${r.stderr.slice(-2000)}`,
      { task: task.name, image: tag }, "the task's /workspace repository must have a HEAD commit");
  }
}

async function commitTaskImage(sb: Sandbox, task: TaskDefinition, tag: string): Promise<void> {
  const [repo, version] = tag.split(":") as [string, string];
  try {
    await sb.container.commit({
      repo,
      tag: version,
      // The build sandbox's run labels must not live on in the image: every
      // container of it would otherwise claim the dead build process as owner.
      changes: [
        `LABEL ${LABEL.owner}=${OWNER} ${LABEL.imageKind}=task ${LABEL.task}=${task.name}`,
        `LABEL ${[LABEL.run, LABEL.rollout, LABEL.stage, LABEL.pid, LABEL.host].map((l) => `${l}=""`).join(" ")}`,
        `WORKDIR ${WORKSPACE}`,
      ],
      pause: true,
    } as never);
  } catch (e) {
    throw daemonError(e, "commit task image", { task: task.name, image: tag });
  }
}

async function buildFromSetupScript(task: TaskDefinition, baseTag: string, tag: string, log: BuildLog): Promise<void> {
  const sb = await Sandbox.start({ image: baseTag, rolloutId: `build-${task.name}`, stage: "build", profile: "build" });
  try {
    await sb.exec(["mkdir", "-p", "/environment"], { user: "0" });
    await sb.putFiles("/environment", filesOfDir(task.environment.dir, ""));
    const r = await sb.exec(["bash", "/environment/setup.sh"], { user: "0", workdir: "/environment", timeoutMs: task.config.buildTimeoutSec * 1000 });
    log(r.stdout + r.stderr);
    if (r.exitCode !== 0) {
      throw new SandboxEnvError("image_build_failed", `setup.sh exited ${r.exitCode}: ${r.stderr.slice(-2000)}`,
        { task: task.name, image: tag }, "fix the task's environment/setup.sh");
    }
    await sb.exec(["rm", "-rf", "/environment"], { user: "0" });
    await cutHistory(sb, task, tag);
    await commitTaskImage(sb, task, tag);
  } finally {
    await sb.remove();
  }
}

