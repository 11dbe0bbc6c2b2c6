/**
 * One task container: create/start, exec with timeout and output cap, copy
 * files in and out as tar, stop, remove. Every container carries the run and
 * rollout labels (see LABEL) so the reaper can always find leftovers.
 */
import type Docker from "dockerode";
import { existsSync, lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { armDiskQuota, filesystemFull } from "./disk-quota.ts";
import { takePreparedQuota } from "./quota-pool.ts";
import { CappedOutput, dockerClient, readAll } from "./docker.ts";
import { ExecChannel } from "./exec-channel.ts";
import { EXEC_SERVER, EXEC_SERVER_CAPS, execServerHostDir } from "./exec-server.ts";
import { sandboxHost } from "./host-settings.ts";
import { AgentLimitError, SandboxEnvError, daemonError, type SandboxErrorContext } from "./errors.ts";
import type { Readable } from "node:stream";
import { currentRun } from "./run-identity.ts";
import { packFiles, unpack, type TarEntry, type TarFile, type TarOwner } from "./tar.ts";
import { AGENT_UID, DEFAULT_LIMITS, LABEL, OWNER, WORKSPACE, type SandboxLimits, type SandboxStage } from "./types.ts";

export interface BindMount {
  hostPath: string;
  containerPath: string;
  readOnly: boolean;
}

export interface SandboxSpec {
  image: string;
  rolloutId: string;
  stage: SandboxStage | "build" | "pool";
  limits?: SandboxLimits;
  mounts?: BindMount[];
  env?: Record<string, string>;
  /**
   * "task" (default): non-root, all capabilities dropped, no-new-privileges,
   * no network. "build": root with default capabilities, still no network —
   * only for running a task's own setup script while building its image.
   */
  profile?: "task" | "build";
  /** Extra labels (e.g. the warm pool's image key). */
  labels?: Record<string, string>;
}

export interface ExecOptions {
  timeoutMs?: number;
  /** Per-stream cap on captured bytes; the rest is discarded, `truncated` set. */
  capBytes?: number;
  user?: string;
  env?: Record<string, string>;
  workdir?: string;
  stdin?: Buffer | string;
  /** Called with each chunk of stdout as it arrives (before the cap applies), e.g. to show a long command's progress. */
  onStdout?: (chunk: Buffer) => void;
}

export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  truncated: boolean;
  ms: number;
}

/** timeout(1) exits 124 when it stopped the command, 137 (128+KILL) when KILL did it. */
const TIMEOUT_EXITS = new Set([124, 137]);
/** How long past its timeout an exec's output may stay open before we stop waiting. */
const EXEC_GRACE_MS = 5_000;
/** How long past execd's own grace period the host waits for its word before asking whether the container died. */
const EXEC_SERVER_SLACK_MS = 5_000;

/**
 * Whether a container runs execd (exec-server.ts) as its main process. Grading keeps
 * `docker exec`: its trusted runner runs as root, which execd refuses, and reward code
 * stays on the path that has the fewest parts. Build containers run their setup as root.
 */
export function usesExecServer(spec: SandboxSpec): boolean {
  return sandboxHost().execServer && (spec.profile ?? "task") === "task" && spec.stage !== "grading";
}

/** A command's timeout in whole seconds (at least 1), as both exec paths enforce it; undefined: none. */
function timeoutSeconds(opts: ExecOptions): number | undefined {
  return opts.timeoutMs !== undefined ? Math.max(1, Math.ceil(opts.timeoutMs / 1000)) : undefined;
}

/**
 * The caller's onStdout, fed each chunk. A throw is kept, not raised (the output keeps flowing
 * to the end), and the exec then rejects with the caller's own error, as is.
 */
function stdoutHook(onStdout: ((chunk: Buffer) => void) | undefined): { feed: (chunk: Buffer) => void; error: () => unknown } {
  let error: unknown;
  return {
    feed: (chunk) => {
      if (!onStdout || error !== undefined) return;
      try {
        onStdout(chunk);
      } catch (e) {
        error = e ?? new Error("onStdout threw");
      }
    },
    error: () => error,
  };
}

/** The uid and gid execd runs a command as, or undefined when the command must go through `docker exec` (root, a user name). */
function servedUser(user: string | undefined): { uid: number; gid: number } | undefined {
  const m = /^(\d+):(\d+)$/.exec(user ?? `${AGENT_UID}:${AGENT_UID}`);
  if (!m) return undefined;
  const uid = Number(m[1]);
  const gid = Number(m[2]);
  return uid > 0 && gid > 0 && uid < 2 ** 32 && gid < 2 ** 32 ? { uid, gid } : undefined;
}

export function containerCreateOptions(spec: SandboxSpec): Docker.ContainerCreateOptions {
  const limits = spec.limits ?? DEFAULT_LIMITS;
  const run = currentRun();
  const task = (spec.profile ?? "task") === "task";
  const served = usesExecServer(spec);
  return {
    Image: spec.image,
    // Held open by execd, which takes commands over the attach stream, or by a
    // do-nothing process when every command comes through `docker exec`.
    Cmd: served ? [EXEC_SERVER.binary] : ["sleep", "infinity"],
    ...(served ? { OpenStdin: true, StdinOnce: false } : {}),
    // PID 1 (docker-init) and its child run as root so the agent's uid cannot
    // signal them: otherwise `kill 1` would stop the container and turn a
    // failing rollout into an env_error, which is never trained on. Root here
    // holds no capabilities but execd's four (which its commands never keep);
    // every command runs as the agent unless told otherwise.
    User: "0:0",
    WorkingDir: WORKSPACE,
    Env: Object.entries({ HOME: "/tmp", ...spec.env }).map(([k, v]) => `${k}=${v}`),
    Labels: {
      [LABEL.owner]: OWNER,
      [LABEL.run]: run.runId,
      [LABEL.rollout]: spec.rolloutId,
      [LABEL.stage]: spec.stage,
      [LABEL.pid]: `${run.pid}:${run.pidStart}`,
      [LABEL.host]: run.host,
      ...spec.labels,
    },
    HostConfig: {
      // docker-init as PID 1 reaps orphans, so zombies do not eat the pids limit.
      Init: true,
      NetworkMode: "none",
      CapDrop: task ? ["ALL"] : [],
      // The grading runner runs as root to stay out of the verifier's reach (a
      // uid the code under test cannot signal); it needs to start the verifier
      // as the agent and kill all of the agent's processes afterwards. Processes
      // of any other uid hold none of these (no-new-privileges, no file caps).
      CapAdd: task && spec.stage === "grading" ? ["KILL", "SETUID", "SETGID"] : served ? [...EXEC_SERVER_CAPS] : [],
      SecurityOpt: task ? ["no-new-privileges"] : [],
      PidsLimit: limits.pids,
      Memory: limits.memoryBytes,
      MemorySwap: limits.memoryBytes,
      NanoCpus: Math.round(limits.cpus * 1e9),
      Binds: [
        ...(spec.mounts ?? []).map((m) => `${m.hostPath}:${m.containerPath}:${m.readOnly ? "ro" : "rw"}`),
        ...(served ? [`${execServerHostDir()}:${EXEC_SERVER.dir}:ro`] : []),
      ],
      // execd's stdout carries every command's output: nothing of it belongs in the daemon's log files.
      ...(served ? { LogConfig: { Type: "none", Config: {} } } : {}),
      Tmpfs: { "/tmp": `rw,nosuid,nodev,size=${limits.tmpBytes},mode=1777` },
      ShmSize: limits.shmBytes,
      AutoRemove: false,
    },
  };
}

export class Sandbox {
  private removed = false;
  /** Host folder of the quota filesystem holding the container's writable layer (none for build containers). */
  private quotaDir: string | undefined;
  /** The attach stream to execd (usesExecServer), or undefined when every command goes through `docker exec`. */
  private channel: ExecChannel | undefined;

  private constructor(
    readonly container: Docker.Container,
    readonly spec: SandboxSpec,
  ) {}

  get id(): string {
    return this.container.id;
  }

  /** Container paths the sandbox mounted itself (execd's folder), beside the spec's mounts. */
  ownMountPoints(): string[] {
    return this.channel ? [EXEC_SERVER.dir] : [];
  }

  context(): SandboxErrorContext {
    return { rollout: this.spec.rolloutId, container: this.id.slice(0, 12), image: this.spec.image, stage: this.spec.stage };
  }

  /** Creates and starts a container. On a failed start the container is removed. */
  static async start(spec: SandboxSpec): Promise<Sandbox> {
    const docker = dockerClient();
    let container: Docker.Container;
    try {
      container = await docker.createContainer(containerCreateOptions(spec));
    } catch (e) {
      throw daemonError(e, "create container", { rollout: spec.rolloutId, image: spec.image, stage: spec.stage });
    }
    const sb = new Sandbox(container, spec);
    const diskBytes = (spec.limits ?? DEFAULT_LIMITS).diskBytes;
    // Attached before the start, beside the quota, so the first command can follow the start at once.
    const attaching = usesExecServer(spec) ? ExecChannel.attach(container) : undefined;
    // Handled from here on: a daemon that dies while the quota is armed must not crash the process.
    attaching?.catch(() => {});
    try {
      if ((spec.profile ?? "task") === "task" && diskBytes > 0) {
        sb.quotaDir = await armDiskQuota(container, diskBytes, sb.context(), takePreparedQuota(diskBytes));
      }
      if (attaching) {
        sb.channel = await attaching.catch((e: unknown) => {
          throw daemonError(e, "attach to the container's command server", sb.context());
        });
      }
    } catch (e) {
      void attaching?.then((c) => c.close(), () => {});
      await sb.remove().catch(() => {});
      throw e;
    }
    try {
      await container.start();
    } catch (e) {
      await sb.remove().catch(() => {});
      throw daemonError(e, "start container", sb.context());
    }
    return sb;
  }

  /** Runs a command; a non-zero exit is a result, a daemon failure throws SandboxEnvError. */
  async exec(cmd: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const user = servedUser(opts.user);
    if (this.channel && user) return this.execServed(this.channel, user, cmd, opts);
    const t0 = performance.now();
    const timeoutSec = timeoutSeconds(opts);
    // timeout(1) runs the command in its own process group and kills the whole group.
    const argv = timeoutSec !== undefined ? ["timeout", "-s", "KILL", String(timeoutSec), ...cmd] : cmd;
    const out = new CappedOutput(opts.capBytes ?? 1 << 20);
    let exec: Docker.Exec;
    const hook = stdoutHook(opts.onStdout);
    try {
      exec = await this.container.exec({
        Cmd: argv,
        AttachStdout: true,
        AttachStderr: true,
        AttachStdin: opts.stdin !== undefined,
        User: opts.user ?? (this.spec.profile === "build" ? "0:0" : `${AGENT_UID}:${AGENT_UID}`),
        ...(opts.workdir ? { WorkingDir: opts.workdir } : {}),
        Env: Object.entries(opts.env ?? {}).map(([k, v]) => `${k}=${v}`),
      });
      const stream = await exec.start({ hijack: true, stdin: opts.stdin !== undefined });
      const done = new Promise<void>((resolve, reject) => {
        stream.on("end", resolve);
        stream.on("close", resolve);
        stream.on("error", reject);
      });
      if (opts.onStdout) out.stdout.on("data", hook.feed);
      this.container.modem.demuxStream(stream, out.stdout, out.stderr);
      if (opts.stdin !== undefined) stream.end(opts.stdin);
      // The stream ends when every holder of the exec's stdout closes it, not when
      // the command exits. timeout(1) kills the command's process group; a process
      // that left the group (setsid) and kept stdout open would hold the stream
      // past it. After a grace period we stop waiting: a running container means
      // the command's own processes held on (a timeout, the agent's doing), a
      // stopped one means the container died.
      const guardMs = (timeoutSec ?? 0) * 1000 + EXEC_GRACE_MS;
      let guard: NodeJS.Timeout | undefined;
      const held = new Promise<"held">((r) => (guard = setTimeout(() => r("held"), guardMs)));
      const first = timeoutSec !== undefined ? await Promise.race([done, held]) : await done;
      clearTimeout(guard);
      if (first === "held") {
        stream.destroy();
        if (!(await this.state()).running) {
          throw new SandboxEnvError("container_died", `exec did not return ${guardMs} ms after its timeout`, this.context());
        }
        return { exitCode: 137, ...out.text(), timedOut: true, truncated: out.truncated, ms: performance.now() - t0 };
      }
      if (hook.error() !== undefined) throw hook.error();
      const info = await exec.inspect();
      const exitCode = info.ExitCode ?? -1;
      const ms = performance.now() - t0;
      const timedOut = timeoutSec !== undefined && TIMEOUT_EXITS.has(exitCode) && ms >= timeoutSec * 1000 - 50;
      return { exitCode, ...out.text(), timedOut, truncated: out.truncated, ms };
    } catch (e) {
      if (e instanceof SandboxEnvError || (hook.error() !== undefined && e === hook.error())) throw e;
      throw await this.diedOr(e, `exec ${cmd[0]}`);
    }
  }

  /** exec through execd: the same result as `docker exec` gives, without a `runc exec`. */
  private async execServed(channel: ExecChannel, user: { uid: number; gid: number }, cmd: string[], opts: ExecOptions): Promise<ExecResult> {
    const t0 = performance.now();
    const timeoutSec = timeoutSeconds(opts);
    const out = new CappedOutput(opts.capBytes ?? 1 << 20);
    const hook = stdoutHook(opts.onStdout);
    const onStdout = (c: Buffer): void => {
      hook.feed(c);
      out.add(c, "out");
    };
    // Bad input (a NUL byte, stdin over the limit) throws here, before anything is sent.
    const run = channel.run(
      {
        argv: cmd,
        ...user,
        env: opts.env ?? {},
        workdir: opts.workdir ?? "",
        timeoutMs: (timeoutSec ?? 0) * 1000,
        graceMs: EXEC_GRACE_MS,
        ...(opts.stdin !== undefined ? { stdin: Buffer.from(opts.stdin) } : {}),
      },
      onStdout,
      (c) => out.add(c, "err"),
    );
    try {
      let result: { exitCode: number; timedOut: boolean } | "silent";
      if (timeoutSec === undefined) result = await run.done;
      else {
        // execd answers by its deadline plus the grace period; past that, it or the container is gone.
        let guard: NodeJS.Timeout | undefined;
        const silent = new Promise<"silent">((r) => (guard = setTimeout(() => r("silent"), timeoutSec * 1000 + EXEC_GRACE_MS + EXEC_SERVER_SLACK_MS)));
        result = await Promise.race([run.done, silent]).finally(() => clearTimeout(guard));
      }
      if (result === "silent") {
        channel.kill(run.id);
        if (!(await this.state()).running) {
          throw new SandboxEnvError("container_died", `exec ${cmd[0]}: no answer from the command server ${EXEC_GRACE_MS + EXEC_SERVER_SLACK_MS} ms after the command's timeout`, this.context());
        }
        return { exitCode: 137, ...out.text(), timedOut: true, truncated: out.truncated, ms: performance.now() - t0 };
      }
      if (hook.error() !== undefined) throw hook.error();
      return { exitCode: result.exitCode, ...out.text(), timedOut: result.timedOut, truncated: out.truncated, ms: performance.now() - t0 };
    } catch (e) {
      if (e instanceof SandboxEnvError || (hook.error() !== undefined && e === hook.error())) throw e;
      throw await this.diedOr(e, `exec ${cmd[0]}`);
    }
  }

  /** Convenience: run a shell snippet. */
  sh(script: string, opts: ExecOptions = {}): Promise<ExecResult> {
    return this.exec(["bash", "-c", script], opts);
  }

  /** Copies files into `dir` (must exist). Files own by their uid/gid, created directories by `dirOwner`. */
  async putFiles(dir: string, files: TarFile[], dirOwner: TarOwner = { uid: 0, gid: 0 }): Promise<void> {
    const tar = await packFiles(files, dirOwner);
    try {
      await this.container.putArchive(tar, { path: dir });
    } catch (e) {
      throw await this.diedOr(e, `copy into ${dir}`);
    }
  }

  /**
   * Copies a path out; entries are relative to the path's parent (Docker's
   * convention). Past `maxBytes` of tar it throws AgentLimitError: the agent
   * filled its workspace, and the host must not buffer it.
   */
  async getFiles(path: string, maxBytes = Number.POSITIVE_INFINITY): Promise<TarEntry[]> {
    let tar: Buffer | undefined;
    try {
      const stream = await this.container.getArchive({ path });
      tar = await readAll(stream as unknown as Readable, maxBytes);
    } catch (e) {
      throw await this.diedOr(e, `copy out of ${path}`);
    }
    if (!tar) throw new AgentLimitError("max_workspace_bytes", `${path} is larger than ${maxBytes} bytes`, this.context());
    return unpack(tar);
  }

  /**
   * A regular file's content, read by the daemon (no process in the
   * container, which may be out of pids or memory, and no `cat` that a FIFO
   * or a link to /dev/zero could hold forever). Undefined when the path is
   * missing, is not a regular file, or is larger than `maxBytes`.
   */
  async readRegularFile(path: string, maxBytes: number): Promise<Buffer | undefined> {
    let tar: Buffer | undefined;
    try {
      const stream = await this.container.getArchive({ path });
      // Tar adds a header and padding; the cap is checked on the entry itself below.
      tar = await readAll(stream as unknown as Readable, maxBytes + 4096);
    } catch (e) {
      if ((e as { statusCode?: number }).statusCode === 404) return undefined;
      throw await this.diedOr(e, `copy out of ${path}`);
    }
    if (!tar) return undefined;
    const entries = await unpack(tar);
    const only = entries.length === 1 ? entries[0]! : undefined;
    return only?.type === "file" && only.content.length <= maxBytes ? only.content : undefined;
  }

  /**
   * Paths the container changed relative to its image. With overlay2 and a
   * readable upper dir (root on the Docker host) this walks the upper layer
   * directly (~1 ms); `docker diff` answers the same in ~0.4-0.5 s here.
   */
  async changes(): Promise<Array<{ path: string; kind: "modified" | "added" | "deleted" }>> {
    try {
      const info = await this.container.inspect();
      const data = info.GraphDriver?.Data as { UpperDir?: string } | undefined;
      const upper = info.GraphDriver?.Name === "overlay2" ? data?.UpperDir : undefined;
      if (upper && existsSync(upper)) return walkUpperDir(upper, this.context());
      const list = ((await this.container.changes()) ?? []) as Array<{ Path: string; Kind: number }>;
      const kinds = ["modified", "added", "deleted"] as const;
      return list.map((c) => ({ path: c.Path, kind: kinds[c.Kind] ?? "modified" }));
    } catch (e) {
      if (e instanceof AgentLimitError) throw e;
      throw await this.diedOr(e, "diff container");
    }
  }

  /** State after the fact: was it OOM-killed, is it still running. */
  async state(): Promise<{ running: boolean; oomKilled: boolean; pid: number }> {
    try {
      const s = (await this.container.inspect()).State;
      return { running: s.Running, oomKilled: s.OOMKilled, pid: s.Pid };
    } catch (e) {
      throw daemonError(e, "inspect container", this.context());
    }
  }

  /**
   * Filesystems the container filled: "/" (its writable layer, past the disk
   * quota), "/tmp", "/dev/shm". Read from the host, also while paused.
   */
  async fullFilesystems(): Promise<string[]> {
    const { pid, running } = await this.state();
    const full: string[] = [];
    if (this.quotaDir && filesystemFull(this.quotaDir)) full.push("/");
    if (running) for (const m of ["/tmp", "/dev/shm"]) if (filesystemFull(`/proc/${pid}/root${m}`)) full.push(m);
    return full;
  }

  /** Whether anything was left in the container's /dev/shm (read from the host, also while paused). */
  async shmUsed(): Promise<boolean> {
    const { pid, running } = await this.state();
    if (!running) return false;
    try {
      return readdirSync(`/proc/${pid}/root/dev/shm`).length > 0;
    } catch {
      return false; // not root on the host: the detector is silent
    }
  }

  /** Freezes every process in the container (cgroup freezer); remove() still works. */
  async pause(): Promise<void> {
    try {
      await this.container.pause();
    } catch (e) {
      throw await this.diedOr(e, "pause");
    }
  }

  async stop(graceSec = 1): Promise<void> {
    try {
      await this.container.stop({ t: graceSec });
    } catch (e) {
      if ((e as { statusCode?: number }).statusCode === 304) return; // already stopped
      throw daemonError(e, "stop container", this.context());
    }
  }

  /** Kills and removes; idempotent. */
  async remove(): Promise<void> {
    if (this.removed) return;
    this.removed = true;
    this.channel?.close();
    try {
      await this.container.remove({ force: true, v: true });
    } catch (e) {
      if ((e as { statusCode?: number }).statusCode === 404) return;
      throw daemonError(e, "remove container", this.context());
    }
  }

  /** A failed call on a container that is no longer running is `container_died`. */
  private async diedOr(e: unknown, what: string): Promise<SandboxEnvError> {
    const running = await this.container
      .inspect()
      .then((i) => i.State.Running)
      .catch(() => false);
    if (!running) {
      return new SandboxEnvError("container_died", `${what}: container is not running`, this.context(), undefined, { cause: e });
    }
    return daemonError(e, what, this.context());
  }
}

/**
 * Bounds of the host-side walk of a container's changes. A tree beyond them
 * (a directory chain thousands deep, whose paths pass PATH_MAX; millions of
 * entries) is the agent's doing: the rollout ends as `pathological_tree`
 * instead of failing the scan (ENAMETOOLONG) as an environment error.
 */
export const TREE_LIMITS = { depth: 256, pathBytes: 3072, entries: 500_000 } as const;

/**
 * Entries of an overlay upper dir as container paths. A 0/0 character device
 * is overlayfs's whiteout (a deletion); we report any other entry as changed
 * ("modified": telling added from modified would need the lower layers).
 */
export function walkUpperDir(upper: string, ctx: SandboxErrorContext = {}): Array<{ path: string; kind: "modified" | "deleted" }> {
  const out: Array<{ path: string; kind: "modified" | "deleted" }> = [];
  const tooMuch = (why: string) => new AgentLimitError("pathological_tree", `the container's changes are ${why}`, ctx, "pathological_tree");
  const walk = (dir: string, rel: string, depth: number): void => {
    if (depth > TREE_LIMITS.depth) throw tooMuch(`nested deeper than ${TREE_LIMITS.depth} levels (at ${rel.slice(0, 200)}…)`);
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENAMETOOLONG" || code === "ELOOP") throw tooMuch(`too deep to walk (${code})`);
      throw e;
    }
    for (const d of entries) {
      const path = `${rel}/${d.name}`;
      if (Buffer.byteLength(path) > TREE_LIMITS.pathBytes) throw tooMuch(`nested past ${TREE_LIMITS.pathBytes}-byte paths (at ${path.slice(0, 200)}…)`);
      if (d.isCharacterDevice() && lstatSync(join(dir, d.name)).rdev === 0) out.push({ path, kind: "deleted" });
      else out.push({ path, kind: "modified" });
      if (out.length > TREE_LIMITS.entries) throw tooMuch(`more than ${TREE_LIMITS.entries} entries`);
      if (d.isDirectory()) walk(join(dir, d.name), path, depth + 1);
    }
  };
  walk(upper, "", 0);
  return out;
}
