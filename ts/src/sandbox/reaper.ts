/**
 * Removes containers left behind by runs whose process is gone (killed,
 * crashed), and the prepared quota filesystems they held. Safe to call at
 * any time: containers and filesystems of live runs are kept.
 */
import { dockerClient } from "./docker.ts";
import { daemonError } from "./errors.ts";
import { reapQuotaStaging } from "./quota-pool.ts";
import { currentRun, ownerAlive } from "./run-identity.ts";
import { LABEL, OWNER } from "./types.ts";

export interface ReapReport {
  removed: string[];
  kept: number;
  /** Staging folders of prepared quota filesystems a dead process left (quota-pool.ts), unmounted and removed. */
  quotaStaging: string[];
}

export interface ReapOptions {
  /** Also remove containers of these run ids even if their process lives. */
  runIds?: string[];
}

export async function reapDeadRuns(opts: ReapOptions = {}): Promise<ReapReport> {
  const docker = dockerClient();
  let list: Awaited<ReturnType<typeof docker.listContainers>>;
  try {
    list = await docker.listContainers({ all: true, filters: { label: [`${LABEL.owner}=${OWNER}`] } });
  } catch (e) {
    throw daemonError(e, "list containers for the reaper");
  }
  const doomed = list.filter((c) => {
    const labels = c.Labels ?? {};
    if (opts.runIds?.includes(labels[LABEL.run] ?? "")) return true;
    const [pid, start] = (labels[LABEL.pid] ?? "").split(":");
    // No owning process: not a sandbox but a `docker build` step, whose
    // container inherits the base image's owner label. Its build is alive and
    // the daemon removes it (forcerm); reaping it would fail that build.
    if (!pid || !start) return false;
    return !ownerAlive(Number(pid), start, labels[LABEL.host] ?? "");
  });
  await Promise.all(
    doomed.map((c) =>
      docker
        .getContainer(c.Id)
        .remove({ force: true, v: true })
        .catch((e: { statusCode?: number }) => {
          if (e.statusCode !== 404 && e.statusCode !== 409) throw daemonError(e, `reap ${c.Id.slice(0, 12)}`);
        }),
    ),
  );
  const quotaStaging = await reapQuotaStaging(opts.runIds);
  return { removed: doomed.map((c) => c.Id), kept: list.length - doomed.length, quotaStaging };
}

/**
 * Containers a process created that still exist: its label is `PID:START` (container.ts), so the
 * daemon's exact-value label filter cannot select it and the prefix is matched here.
 */
export async function containersOfProcess(pid: number): Promise<string[]> {
  const list = await dockerClient().listContainers({ all: true, filters: { label: [LABEL.pid] } });
  return list.filter((c) => (c.Labels?.[LABEL.pid] ?? "").startsWith(`${pid}:`)).map((c) => c.Id);
}

/** Containers of one run that still exist (tests assert this is zero). */
export async function containersOfRun(runId: string): Promise<string[]> {
  const list = await dockerClient().listContainers({ all: true, filters: { label: [`${LABEL.run}=${runId}`] } });
  return list.map((c) => c.Id);
}

/** Removes the containers of this process's run that `pick` chooses (gone already: not an error); returns their ids. */
async function removeThisRunsContainers(pick: (labels: Record<string, string>) => boolean): Promise<string[]> {
  const docker = dockerClient();
  let list: Awaited<ReturnType<typeof docker.listContainers>>;
  try {
    list = await docker.listContainers({ all: true, filters: { label: [`${LABEL.run}=${currentRun().runId}`] } });
  } catch (e) {
    throw daemonError(e, "list containers of this run");
  }
  const chosen = list.filter((c) => pick(c.Labels ?? {}));
  await Promise.all(
    chosen.map((c) =>
      docker.getContainer(c.Id).remove({ force: true, v: true }).catch((e: { statusCode?: number }) => {
        if (e.statusCode !== 404 && e.statusCode !== 409) throw daemonError(e, `remove ${c.Id.slice(0, 12)}`);
      }),
    ),
  );
  return chosen.map((c) => c.Id);
}

/**
 * Removes this run's containers of the given rollouts (label `rollout` = ID or ID.…), for an owner
 * whose own removals failed while the daemon was away: once it answers again nothing is left behind.
 * Other owners in the same process keep theirs (they ran other rollouts).
 */
export async function removeRolloutContainers(rolloutIds: ReadonlySet<string>): Promise<string[]> {
  if (rolloutIds.size === 0) return [];
  return removeThisRunsContainers((labels) => {
    const r = labels[LABEL.rollout] ?? "";
    return [...rolloutIds].some((id) => r === id || r.startsWith(`${id}.`));
  });
}

/**
 * Removes every container of this process's run on the current Docker endpoint (warm pools included): how a
 * worker that is told to stop ends the rollouts in flight at once (their next call on the container fails) and
 * leaves nothing behind. Other processes' containers are not touched.
 */
export async function removeRunContainers(): Promise<string[]> {
  return removeThisRunsContainers(() => true);
}
