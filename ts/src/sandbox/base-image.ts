/**
 * The base image every task image builds on, made without any registry:
 *   1. debootstrap a minimal Debian through the machine's own apt mirror;
 *   2. add the non-root `agent` user, /workspace and system git settings;
 *   3. stream the tree into `docker import`.
 * The tag is a content hash of the inputs (suite, variant, packages, recipe
 * version), so a second call is one `image inspect` (a cache hit, ~ms).
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { join } from "node:path";
import { debianMirrorFor } from "./apt-sources.ts";
import { dockerClient, followProgress } from "./docker.ts";
import { SandboxEnvError, daemonError } from "./errors.ts";
import { shortHash } from "./hash.ts";
import { touchImage } from "./image-state.ts";
import { sandboxHost } from "./host-settings.ts";
import { buildLockPath, withHostLock } from "./host-lock.ts";
import { AGENT_UID, AGENT_USER, LABEL, OWNER, WORKSPACE } from "./types.ts";

export interface BaseImageSpec {
  /** Debian suite to bootstrap. */
  suite: string;
  /** Packages beyond the minbase set: the interpreter, VCS and test runner tasks need. */
  packages: string[];
}

export const DEFAULT_BASE: BaseImageSpec = {
  suite: "bookworm",
  packages: ["python3", "python3-pytest", "git", "procps"],
};

/** Bump when the recipe below changes, so old tags stop matching. */
const RECIPE_VERSION = "base-v2";
const REPO = "lego-rl/base";

export function baseImageTag(spec: BaseImageSpec = DEFAULT_BASE): string {
  const inputs = [RECIPE_VERSION, spec.suite, "minbase", ...[...spec.packages].sort()];
  return `${REPO}:${shortHash(inputs)}`;
}

export async function imageExists(tag: string): Promise<boolean> {
  try {
    await dockerClient().getImage(tag).inspect();
    return true;
  } catch (e) {
    if ((e as { statusCode?: number }).statusCode === 404) return false;
    throw daemonError(e, `inspect image ${tag}`, { image: tag });
  }
}

export interface BuildLog {
  (line: string): void;
}

/** Returns the base image tag, building it first if this machine lacks it. */
export async function ensureBaseImage(
  spec: BaseImageSpec = DEFAULT_BASE,
  log: BuildLog = () => {},
): Promise<{ tag: string; cached: boolean; ms: number }> {
  const t0 = performance.now();
  const tag = baseImageTag(spec);
  touchImage(tag);
  if (await imageExists(tag)) return { tag, cached: true, ms: performance.now() - t0 };
  return withHostLock(buildLockPath(tag), async () => {
    // Another process may have built it while we waited for the lock.
    if (await imageExists(tag)) return { tag, cached: true, ms: performance.now() - t0 };
    await buildBaseImage(spec, tag, log);
    return { tag, cached: false, ms: performance.now() - t0 };
  });
}

function run(cmd: string, args: string[], log: BuildLog): Promise<void> {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"] });
    let tail = "";
    const keep = (c: Buffer) => {
      tail = (tail + c.toString()).slice(-4000);
      for (const l of c.toString().split("\n")) if (l.trim()) log(l);
    };
    p.stdout.on("data", keep);
    p.stderr.on("data", keep);
    p.on("error", reject);
    p.on("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`${cmd} ${args.join(" ")} exited ${code}:\n${tail}`)),
    );
  });
}

async function buildBaseImage(spec: BaseImageSpec, tag: string, log: BuildLog): Promise<void> {
  const mirror = debianMirrorFor(spec.suite);
  if (!mirror) {
    throw new SandboxEnvError("image_build_failed", `no apt source serves ${spec.suite} main`, { image: tag },
      "add a Debian mirror for this suite to /etc/apt/sources.list(.d)");
  }
  const root = mkdtempSync(join(sandboxHost().buildTmp, "lego-base-"));
  try {
    log(`debootstrap ${spec.suite} from ${mirror} into ${root}`);
    try {
      await run("debootstrap", ["--variant=minbase", `--include=${spec.packages.join(",")}`,
        "--components=main", spec.suite, root, mirror], log);
      // Inside the new root: the agent user, the workspace it owns, git defaults
      // so commits work without a per-container config.
      const setup = [
        `useradd -m -u ${AGENT_UID} -U -s /bin/bash ${AGENT_USER}`,
        `mkdir -p ${WORKSPACE} /logs/verifier && chown ${AGENT_UID}:${AGENT_UID} ${WORKSPACE} /logs/verifier`,
        "git config --system safe.directory '*'",
        "git config --system init.defaultBranch main",
        "git config --system user.name lego && git config --system user.email lego@localhost",
        "apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin",
      ].join(" && ");
      await run("chroot", [root, "/bin/sh", "-c", setup], log);
    } catch (e) {
      throw new SandboxEnvError("image_build_failed", (e as Error).message, { image: tag },
        "debootstrap needs root, network access to the apt mirror and the Debian keyring", { cause: e });
    }
    log(`docker import → ${tag}`);
    const tar = spawn("tar", ["-C", root, "--numeric-owner", "-c", "."], { stdio: ["ignore", "pipe", "inherit"] });
    const [repo, version] = tag.split(":") as [string, string];
    const docker = dockerClient();
    try {
      const stream: unknown = await docker.importImage(tar.stdout as never, {
        repo,
        tag: version,
        changes: [
          "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
          "ENV LANG=C.UTF-8",
          `WORKDIR ${WORKSPACE}`,
          `LABEL ${LABEL.owner}=${OWNER} ${LABEL.imageKind}=base`,
        ],
      } as never);
      await followProgress(docker, stream);
    } catch (e) {
      throw daemonError(e, "docker import of the base image", { image: tag });
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
