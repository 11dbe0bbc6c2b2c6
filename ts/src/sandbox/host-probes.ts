/**
 * Detectors the agent cannot switch off, because they live on the host side
 * of the container boundary (the agent has no CAP_NET_ADMIN and cannot see
 * its own cgroup files):
 *  - network: a veth pair (both ends inside the container's network
 *    namespace, so it leads nowhere) carrying a default route, and iptables
 *    REJECT rules on it whose packet counters count
 *    every attempt to leave loopback. The REJECT makes the attempt fail at
 *    once (ECONNREFUSED) instead of hanging; nothing is ever forwarded.
 *  - resources: the container's pids and memory cgroup (v1) counters.
 * Both need root on the Docker host (true for the rollout worker here); where
 * they cannot be armed the flag is simply never raised (`armed: false`).
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { promisify } from "node:util";

const run = promisify(execFile);

/** Address of the guard interface (RFC 5737 TEST-NET-1: never routed anywhere). */
const DUMMY_ADDR = "192.0.2.1/32";
const IFACE = "lego0";

export async function armNetworkGuard(containerPid: number): Promise<boolean> {
  const script = [
    // veth, not dummy: Docker's bridge networking guarantees the veth driver is loaded.
    `ip link add ${IFACE} type veth peer name ${IFACE}p`,
    `ip link set ${IFACE}p up`,
    `ip link set ${IFACE} up`,
    `ip addr add ${DUMMY_ADDR} dev ${IFACE}`,
    `ip route add default dev ${IFACE}`,
    `iptables -w -A OUTPUT -o ${IFACE} -p tcp -j REJECT --reject-with tcp-reset`,
    `iptables -w -A OUTPUT -o ${IFACE} -j REJECT`,
  ].join(" && ");
  try {
    await run("nsenter", ["-t", String(containerPid), "-n", "sh", "-c", script]);
    return true;
  } catch {
    return false; // not root, or no nsenter/iptables: the detector stays unarmed
  }
}

/** Packets that tried to leave loopback since the guard was armed. */
export async function networkAttempts(containerPid: number): Promise<number> {
  try {
    const { stdout } = await run("nsenter", ["-t", String(containerPid), "-n", "iptables", "-w", "-L", "OUTPUT", "-n", "-v", "-x"]);
    let total = 0;
    for (const line of stdout.split("\n")) {
      if (!line.includes(IFACE)) continue;
      const pkts = Number(line.trim().split(/\s+/)[0]);
      if (Number.isFinite(pkts)) total += pkts;
    }
    return total;
  } catch {
    return 0;
  }
}

export interface ResourceCounters {
  /** Times a fork/clone was refused by the pids limit. */
  pidsLimitHits: number;
  /** Processes the kernel OOM-killed in the container. */
  oomKills: number;
}

function readCounter(path: string, key: string): number {
  try {
    const m = new RegExp(`^${key}\\s+(\\d+)`, "m").exec(readFileSync(path, "utf8"));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/** Cgroup v1 with the cgroupfs driver: /sys/fs/cgroup/<ctl>/docker/<id>/…; v2: /sys/fs/cgroup/system.slice/docker-<id>.scope. */
export function resourceCounters(containerId: string): ResourceCounters {
  const v1 = (ctl: string, file: string) => `/sys/fs/cgroup/${ctl}/docker/${containerId}/${file}`;
  const v2 = (file: string) => `/sys/fs/cgroup/system.slice/docker-${containerId}.scope/${file}`;
  return {
    pidsLimitHits: readCounter(v1("pids", "pids.events"), "max") + readCounter(v2("pids.events"), "max"),
    oomKills: readCounter(v1("memory", "memory.oom_control"), "oom_kill") + readCounter(v2("memory.events"), "oom_kill"),
  };
}
