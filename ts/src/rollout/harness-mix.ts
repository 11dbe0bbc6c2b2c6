/**
 * Mixed harnesses in one run: `--harness claude-code=0.5,opencode=0.3,reference=0.2`.
 * Each group gets one harness (so a group's advantages compare the policy
 * under the same harness), chosen by smooth weighted round robin: over any
 * run the groups split by the weights as closely as whole groups allow, and
 * the same task source always gets the same assignment (no dice).
 */
import type { AgentLauncher } from "../tasks/index.ts";
import type { RuntimeMount } from "../sandbox/index.ts";

export interface HarnessShare {
  name: string;
  weight: number;
}

export class HarnessMixError extends Error {
  override name = "HarnessMixError";
}

const NAME = /^[a-z0-9][a-z0-9_-]*$/;

/** `reference` (weight 1) or `a=0.5,b=0.5`; the weights are positive and add up to 1. */
export function parseHarnessMix(spec: string): HarnessShare[] {
  const parts = spec.split(",").map((p) => p.trim());
  if (parts.length === 1 && !parts[0]!.includes("=")) {
    if (!NAME.test(parts[0]!)) throw new HarnessMixError(`--harness: ${JSON.stringify(spec)} is not a harness name`);
    return [{ name: parts[0]!, weight: 1 }];
  }
  const shares = parts.map((p) => {
    const m = /^([^=]+)=(.+)$/.exec(p);
    if (!m || !NAME.test(m[1]!.trim())) throw new HarnessMixError(`--harness: ${JSON.stringify(p)} is not NAME=WEIGHT (in ${JSON.stringify(spec)})`);
    const weight = Number(m[2]);
    if (!Number.isFinite(weight) || weight <= 0) throw new HarnessMixError(`--harness: the weight of ${m[1]} must be a number > 0, got ${JSON.stringify(m[2])}`);
    return { name: m[1]!.trim(), weight };
  });
  const names = shares.map((s) => s.name);
  const twice = names.filter((n, i) => names.indexOf(n) !== i);
  if (twice.length) throw new HarnessMixError(`--harness: ${twice[0]} is named twice in ${JSON.stringify(spec)}`);
  const sum = shares.reduce((a, s) => a + s.weight, 0);
  // A mistyped weight would otherwise be normalised away without anyone seeing it.
  if (Math.abs(sum - 1) > 1e-6) throw new HarnessMixError(`--harness: the weights add up to ${sum}, not 1 (${JSON.stringify(spec)})`);
  return shares;
}

/** The spec string of a TOML table `[harness] claude-code = 0.5 …` (the config file's other spelling). */
export function harnessMixSpec(table: Record<string, unknown>): string {
  return Object.entries(table).map(([k, v]) => {
    if (typeof v !== "number") throw new HarnessMixError(`[harness] ${k} must be a number, got ${JSON.stringify(v)}`);
    return `${k}=${v}`;
  }).join(",");
}

/** Picks the next share by smooth weighted round robin (the share furthest behind its weight). */
export class HarnessAssigner {
  private readonly given: number[];
  private total = 0;

  constructor(private readonly shares: readonly HarnessShare[]) {
    this.given = shares.map(() => 0);
  }

  next(): number {
    let best = 0;
    let bestDeficit = -Infinity;
    this.shares.forEach((s, i) => {
      const deficit = s.weight * (this.total + 1) - this.given[i]!;
      if (deficit > bestDeficit + 1e-12) {
        best = i;
        bestDeficit = deficit;
      }
    });
    this.given[best]! += 1;
    this.total += 1;
    return best;
  }
}

/**
 * One launcher over several: the worker asks `forGroup` once per group; the
 * runtimes of every harness are mounted (a runner serves them all), and the
 * engine version and routing are the first one's that reports them.
 */
export function mixedLauncher(entries: readonly { share: HarnessShare; launcher: AgentLauncher }[]): AgentLauncher & { forGroup(groupId: string): AgentLauncher } {
  if (entries.length === 1) {
    const only = entries[0]!.launcher;
    return { ...only, name: only.name, start: (...a) => only.start(...a), forGroup: () => only };
  }
  const assigner = new HarnessAssigner(entries.map((e) => e.share));
  const byGroup = new Map<string, AgentLauncher>();
  const runtimes = new Map<string, RuntimeMount>();
  for (const e of entries) for (const r of e.launcher.runner?.runtimes ?? []) runtimes.set(`${r.name}\0${r.hostPath}`, r);
  const versioned = entries.find((e) => e.launcher.samplingVersion)?.launcher;
  const routed = entries.find((e) => e.launcher.routing)?.launcher;
  return {
    name: entries.map((e) => `${e.launcher.name}=${e.share.weight}`).join(","),
    runner: { runtimes: [...runtimes.values()] },
    routing: routed?.routing ?? null,
    ...(versioned ? { samplingVersion: () => versioned.samplingVersion!() } : {}),
    forGroup(groupId) {
      let l = byGroup.get(groupId);
      if (!l) {
        l = entries[assigner.next()]!.launcher;
        byGroup.set(groupId, l);
      }
      return l;
    },
    start() {
      throw new Error("a mixed launcher starts rollouts through forGroup(groupId).start");
    },
    async close() {
      await Promise.all(entries.map((e) => e.launcher.close?.()));
    },
  };
}
