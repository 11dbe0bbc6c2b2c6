/**
 * Several Docker hosts behind one worker. Each rollout attempt is placed on
 * the host with the most free slots (its slots minus the attempts it runs), and
 * runs wholly in that host's scope (`withDockerEndpoint`): image, containers,
 * execs and removals all go to that daemon. An attempt that ends in env_error
 * makes the worker ask its host for a ping; a host that does not answer is
 * marked lost (no new attempts go there; the worker's retry lands elsewhere)
 * and probed with doubling back-off until it answers again. Images: the base
 * image is copied from a host that has it (`docker save | load`, streamed) and
 * built only when no host has it; task images build on each host (their builds
 * need no network).
 *
 * Slots: a host given as `ENDPOINT=SLOTS` has those. One given without them
 * gets them from the daemon's own resources (`docker info`: NCPU, MemTotal)
 * when it first answers, by `hostSlots`:
 *   min(cap, ⌊NCPU × cpuOversubscription / limits.cpus⌋, ⌊MemTotal / limits.memoryBytes⌋)
 * with cap = the worker's concurrency and one sandbox container per attempt
 * (the agent container is discarded before grading starts). CPU is
 * oversubscribed because an agent container mostly waits on the model (see
 * DEFAULT_CPU_OVERSUBSCRIPTION); memory is not, because its limit is hard: a
 * container over it is OOM-killed, and a host over it kills whatever the
 * kernel picks. Other users of the same daemon are not subtracted: the layout
 * is one worker per daemon (docs/rollout.md).
 */
import {
  DEFAULT_LIMITS,
  baseImageTag,
  copyImage,
  SandboxEnvError,
  dockerEndpoint,
  ensureBaseImage,
  ensureTaskImage,
  imageExists,
  reapDeadRuns,
  removeRolloutContainers,
  withDockerEndpoint,
  type DockerEndpoint,
  type SandboxLimits,
  type TaskDefinition,
} from "../sandbox/index.ts";
import type { RolloutEvents } from "./events.ts";

/** One `--docker-host` value: `ENDPOINT` or `ENDPOINT=SLOTS`. */
export interface DockerHostSpec {
  endpoint: string;
  /** Attempts this host runs at once; null = from the daemon's resources (`hostSlots`). */
  slots: number | null;
}

/**
 * Sandbox containers per CPU of a host whose slots come from its daemon, when each container is limited to
 * one CPU. An agent container mostly waits on the model: a turn is seconds of engine time during which the
 * harness idles. `pnpm bench:rollout` (docs/benchmarks.md) found rollouts/min still rising at 8 per core
 * (16 in flight on 2 cores) and falling at 16 per core, with a scripted engine that answers at once, the
 * CPU-heaviest case there is. Half of that knee leaves room for tasks whose tests or builds really compute.
 */
export const DEFAULT_CPU_OVERSUBSCRIPTION = 4;

/** How a host without `=SLOTS` gets its slots (the module doc has the rule). */
export interface CapacityRule {
  /** Each sandbox container's limits (`cpus`, `memoryBytes` count here). */
  limits: SandboxLimits;
  /** Containers' CPU limits may add up to this many times the host's CPUs. */
  cpuOversubscription: number;
  /** At most this many (the worker's concurrency: more slots could never fill). */
  cap: number;
}

/** What `docker info` says about a daemon's machine. */
export interface DaemonResources {
  /** `NCPU`. */
  cpus: number;
  /** `MemTotal`, bytes. */
  memoryBytes: number;
}

/** A host's slots and where they came from (the `docker_host_capacity` event and the summary's `dockerHosts`). */
export type HostCapacity =
  | { host: string; slots: number; source: "configured" }
  | { host: string; slots: number; source: "daemon"; cpus: number; memoryBytes: number; cpuSlots: number; memorySlots: number; cap: number };

/** Slots of a host with `resources` under `rule`; an error names the host when not even one sandbox fits. */
export function hostSlots(host: string, resources: DaemonResources, rule: CapacityRule): Extract<HostCapacity, { source: "daemon" }> {
  const cpuSlots = Math.floor((resources.cpus * rule.cpuOversubscription) / rule.limits.cpus + 1e-9);
  const memorySlots = Math.floor(resources.memoryBytes / rule.limits.memoryBytes);
  if (cpuSlots < 1 || memorySlots < 1) {
    throw new Error(`docker host ${host}: ${resources.cpus} CPU(s) × ${rule.cpuOversubscription} and ${gib(resources.memoryBytes)} of memory `
      + `do not fit one sandbox (${rule.limits.cpus} CPU, ${gib(rule.limits.memoryBytes)}): give it =SLOTS or lower the limits`);
  }
  const slots = Math.min(rule.cap, cpuSlots, memorySlots);
  return { host, slots, source: "daemon", cpus: resources.cpus, memoryBytes: resources.memoryBytes, cpuSlots, memorySlots, cap: rule.cap };
}

const gib = (bytes: number) => `${(bytes / 2 ** 30).toFixed(2)} GiB`;

export function parseDockerHostSpec(value: string): DockerHostSpec {
  const m = /^(.+)=(\d+)$/.exec(value);
  const spec = m ? { endpoint: m[1]!, slots: Number(m[2]) } : { endpoint: value, slots: null };
  if (spec.slots !== null && spec.slots < 1) throw new Error(`--docker-host ${value}: slots must be ≥ 1`);
  return spec;
}

export interface DockerHostsOptions {
  /** Slots of a host given without `=SLOTS`: from its daemon's resources. */
  capacity: { cpuOversubscription: number; cap: number; limits?: SandboxLimits };
  events?: RolloutEvents;
  log?: (line: string) => void;
  /** First wait between probes of a lost host, doubled up to maxProbeMs. Default 500. */
  probeMs?: number;
  maxProbeMs?: number;
  /** How long an attempt waits for a host while every host is lost, then fails daemon_unreachable. Default 60 000. */
  allLostMs?: number;
  /** ssh-agent socket for ssh:// endpoints (the entry point reads SSH_AUTH_SOCK). */
  sshAgent?: string;
}

export interface DockerHost {
  readonly endpoint: DockerEndpoint;
  /** 0 until a host without `=SLOTS` first answers (it takes no attempts before: it is lost). */
  slots: number;
  capacity: HostCapacity | null;
  inFlight: number;
  up: boolean;
  /** When it was marked lost (ms since epoch), while it is. */
  lostAt: number | null;
  /** Resolves when a lost host answers again. */
  back: Promise<void> | null;
  /** Rollout ids placed here, so close() sweeps what a failed removal left. */
  readonly ran: Set<string>;
}

const PING_TIMEOUT_MS = 5_000;

export class DockerHosts {
  readonly hosts: DockerHost[];
  private readonly waiters: (() => void)[] = [];
  private readonly bases = new Map<DockerHost, Promise<string>>();
  private readonly taskImages = new Map<string, Promise<string>>();
  private closed = false;
  private readonly timers = new Set<NodeJS.Timeout>();

  private constructor(specs: readonly DockerHostSpec[], private readonly opts: DockerHostsOptions) {
    if (specs.length === 0) throw new Error("DockerHosts needs at least one endpoint");
    const names = specs.map((s) => s.endpoint);
    if (new Set(names).size !== names.length) throw new Error(`--docker-host given twice: ${names.join(", ")}`);
    this.hosts = specs.map((s) => ({
      endpoint: dockerEndpoint(s.endpoint, { sshAgent: opts.sshAgent }),
      slots: s.slots ?? 0, capacity: s.slots === null ? null : { host: s.endpoint, slots: s.slots, source: "configured" as const },
      inFlight: 0, up: true, lostAt: null, back: null, ran: new Set<string>(),
    }));
  }

  /**
   * Opens every host: reaps leftovers of dead runs on each that answers; one
   * that does not starts lost (probed). Throws when none answers.
   */
  static async open(specs: readonly DockerHostSpec[], opts: DockerHostsOptions): Promise<DockerHosts> {
    const hosts = new DockerHosts(specs, opts);
    for (const h of hosts.hosts) if (h.capacity) opts.events?.emit({ kind: "docker_host_capacity", ...h.capacity }); // configured
    await Promise.all(hosts.hosts.map(async (h) => {
      try {
        await withDockerEndpoint(h.endpoint, () => reapDeadRuns());
        await hosts.measure(h);
      } catch (e) {
        if (e instanceof HostCapacityError) {
          await hosts.close();
          throw e;
        }
        hosts.lose(h, e);
      }
    }));
    if (!hosts.hosts.some((h) => h.up)) {
      await hosts.close();
      throw new Error(`no Docker host answers: ${specs.map((s) => s.endpoint).join(", ")}`);
    }
    return hosts;
  }

  /** Each host's slots and where they came from (null: not known yet, the host has not answered). */
  capacities(): (HostCapacity | { host: string; slots: null })[] {
    return this.hosts.map((h) => h.capacity ?? { host: h.endpoint.name, slots: null });
  }

  /** A host without `=SLOTS`: its slots from `docker info` (once; a daemon's machine does not change under it). */
  private async measure(host: DockerHost): Promise<void> {
    if (host.capacity) return;
    const info = (await host.endpoint.docker.info()) as { NCPU?: number; MemTotal?: number };
    if (!info.NCPU || !info.MemTotal) throw new Error(`docker host ${host.endpoint.name}: docker info has no NCPU/MemTotal`);
    const { cpuOversubscription, cap, limits = DEFAULT_LIMITS } = this.opts.capacity;
    let capacity;
    try {
      capacity = hostSlots(host.endpoint.name, { cpus: info.NCPU, memoryBytes: info.MemTotal }, { limits, cpuOversubscription, cap });
    } catch (e) {
      throw new HostCapacityError((e as Error).message);
    }
    host.capacity = capacity;
    host.slots = capacity.slots;
    this.opts.events?.emit({ kind: "docker_host_capacity", ...capacity });
  }

  /** Runs `fn` on the host with the most free slots, in that host's scope; waits while none is free. */
  async place<T>(rolloutId: string, fn: (host: DockerHost) => Promise<T>): Promise<T> {
    const host = await this.acquire();
    host.ran.add(rolloutId);
    this.opts.events?.emit({ kind: "rollout_placed", rolloutId, host: host.endpoint.name });
    try {
      return await withDockerEndpoint(host.endpoint, () => fn(host));
    } finally {
      host.inFlight -= 1;
      this.wake();
    }
  }

  /** After an env_error on `host`: a ping that fails marks it lost. */
  async suspect(host: DockerHost): Promise<void> {
    if (!host.up) return;
    if (!(await ping(host))) this.lose(host, new Error("ping failed after an env_error"));
  }

  /** The base image's tag on `host`: present, copied from a host that has it, or built there. */
  baseImage(host: DockerHost): Promise<string> {
    let p = this.bases.get(host);
    if (!p) {
      p = withDockerEndpoint(host.endpoint, () => this.ensureBase(host));
      // Not remembered when it failed: the host may have been away for a moment.
      p.catch(() => this.bases.get(host) === p && this.bases.delete(host));
      this.bases.set(host, p);
    }
    return p;
  }

  /** The task's image on `host` (its base first), built once per host. */
  taskImage(host: DockerHost, def: TaskDefinition): Promise<string> {
    const key = `${host.endpoint.name}\0${def.environment.image ?? def.name}\0${def.environment.dir}`;
    let p = this.taskImages.get(key);
    if (!p) {
      p = this.baseImage(host).then((base) => withDockerEndpoint(host.endpoint, () => ensureTaskImage(def, base, { log: this.opts.log })).then((i) => i.tag));
      p.catch(() => this.taskImages.get(key) === p && this.taskImages.delete(key));
      this.taskImages.set(key, p);
    }
    return p;
  }

  /**
   * Stops probing and removes, on every host, this run's containers of the
   * rollouts placed there. A lost host is waited for up to `waitForLostMs`
   * first; one still away keeps its leftovers for the next run's reaper (the
   * returned list says which hosts).
   */
  async close(waitForLostMs = 0): Promise<{ unswept: string[] }> {
    const unswept: string[] = [];
    await Promise.all(this.hosts.map(async (h) => {
      if (!h.up && h.back && waitForLostMs > 0) await Promise.race([h.back, new Promise((r) => this.timer(() => r(undefined), waitForLostMs))]);
      if (!h.up || h.ran.size === 0) {
        if (!h.up && h.ran.size) unswept.push(h.endpoint.name);
        return;
      }
      try {
        await withDockerEndpoint(h.endpoint, () => removeRolloutContainers(h.ran));
      } catch {
        unswept.push(h.endpoint.name);
      }
    }));
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    this.wake();
    return { unswept };
  }

  private async ensureBase(host: DockerHost): Promise<string> {
    const tag = baseImageTag();
    if (await imageExists(tag)) return tag;
    for (const other of this.hosts) {
      if (other === host || !other.up) continue;
      if (await withDockerEndpoint(other.endpoint, () => imageExists(tag)).catch(() => false)) {
        this.opts.log?.(`copying ${tag} from ${other.endpoint.name} to ${host.endpoint.name}`);
        await copyImage(tag, other.endpoint, host.endpoint);
        return tag;
      }
    }
    return (await ensureBaseImage(undefined, this.opts.log)).tag;
  }

  private async acquire(): Promise<DockerHost> {
    for (;;) {
      if (this.closed) throw new Error("DockerHosts is closed");
      let best: DockerHost | undefined;
      for (const h of this.hosts) {
        if (!h.up || h.inFlight >= h.slots) continue;
        if (!best || h.slots - h.inFlight > best.slots - best.inFlight) best = h;
      }
      if (best) {
        best.inFlight += 1;
        return best;
      }
      // Woken by a finished attempt or a host coming back; with every host lost, bounded.
      const allLost = !this.hosts.some((h) => h.up);
      const woken = await new Promise<boolean>((r) => {
        this.waiters.push(() => r(true));
        if (allLost) this.timer(() => r(false), this.opts.allLostMs ?? 60_000);
      });
      if (!woken && !this.hosts.some((h) => h.up)) {
        throw new SandboxEnvError("daemon_unreachable", `no Docker host answered for ${this.opts.allLostMs ?? 60_000} ms: ${this.hosts.map((h) => h.endpoint.name).join(", ")}`);
      }
    }
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  private lose(host: DockerHost, why: unknown): void {
    if (!host.up && host.back) return;
    host.up = false;
    host.lostAt = Date.now();
    this.opts.events?.emit({ kind: "docker_host_lost", host: host.endpoint.name, error: String((why as Error)?.message ?? why).slice(0, 300) });
    this.opts.log?.(`docker host ${host.endpoint.name} lost; probing`);
    host.back = new Promise<void>((resolve) => {
      let wait = this.opts.probeMs ?? 500;
      const probe = async () => {
        if (this.closed) return resolve();
        // Back means answering, and for a host without =SLOTS also measured (else it has no slots to give).
        if (await ping(host) && await this.measure(host).then(() => true, () => false)) {
          host.up = true;
          this.opts.events?.emit({ kind: "docker_host_back", host: host.endpoint.name, downS: (Date.now() - host.lostAt!) / 1000 });
          host.lostAt = null;
          host.back = null;
          this.wake();
          return resolve();
        }
        wait = Math.min(wait * 2, this.opts.maxProbeMs ?? 10_000);
        this.timer(probe, wait);
      };
      this.timer(probe, wait);
    });
  }

  private timer(fn: () => unknown, ms: number): void {
    const t = setTimeout(() => {
      this.timers.delete(t);
      void fn();
    }, ms);
    this.timers.add(t);
  }
}

/** A host's resources do not fit one sandbox: the operator's to fix, not a host to wait for. */
export class HostCapacityError extends Error {}

async function ping(host: DockerHost): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      host.endpoint.docker.ping().then(() => true),
      new Promise<boolean>((r) => (timer = setTimeout(() => r(false), PING_TIMEOUT_MS))),
    ]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}
