/**
 * Test support: a second Docker daemon on this machine, owned by the test that
 * starts it. Its own socket, data root, exec root (so its own containerd) and
 * pid file, and its own bridge (`--bridge=NAME` on an interface it creates,
 * `--iptables=false --ip6tables=false`), so it never touches the main daemon's
 * docker0 or iptables. Not `--bridge=none`: dockerd then deletes any existing
 * docker0, the main daemon's included, which broke every later test that
 * needs the default bridge. The data root is kept between runs, so an image
 * copied there once is a cache hit next time.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, openSync, readFileSync, rmSync } from "node:fs";
import Docker from "dockerode";

export class TestDockerDaemon {
  readonly socket: string;
  readonly endpoint: string;
  readonly docker: Docker;
  private proc: ChildProcess | null = null;
  private readonly dataRoot: string;
  private readonly execRoot: string;
  private readonly pidFile: string;
  private readonly logFile: string;
  /** Linux interface names are at most 15 bytes. */
  readonly bridge: string;

  /**
   * `name` keeps two test files' daemons apart (paths under /run and /var/lib,
   * the bridge); so does `bridgeAddress`, a link-local /24 of its own (never
   * routed, never one a real network here uses): two files' daemons may run at
   * once, and two bridges with one subnet would make the host's routes ambiguous.
   */
  constructor(readonly name: string, private readonly bridgeAddress = "169.254.213.1/24") {
    this.socket = `/run/lego-rl-test-dockerd-${name}.sock`;
    this.endpoint = `unix://${this.socket}`;
    this.dataRoot = `/var/lib/lego-rl-test-dockerd-${name}`;
    this.execRoot = `/run/lego-rl-test-dockerd-${name}`;
    this.pidFile = `/run/lego-rl-test-dockerd-${name}.pid`;
    this.logFile = `/tmp/lego-rl-test-dockerd-${name}.log`;
    this.bridge = `legotd-${name}`.slice(0, 15);
    this.docker = new Docker({ socketPath: this.socket });
  }

  /** Starts dockerd and resolves once it answers (bounded). A leftover of a killed test run is stopped first. */
  async start(timeoutMs = 60_000): Promise<void> {
    if (this.proc) throw new Error(`test dockerd ${this.name} already running`);
    this.stopLeftover();
    this.ensureBridge();
    mkdirSync(this.dataRoot, { recursive: true });
    const log = openSync(this.logFile, "a");
    this.proc = spawn("dockerd", [
      "--host", this.endpoint, "--data-root", this.dataRoot, "--exec-root", this.execRoot, "--pidfile", this.pidFile,
      `--bridge=${this.bridge}`, "--iptables=false", "--ip6tables=false", "--ip-masq=false", "--storage-driver", "overlay2",
    ], { stdio: ["ignore", log, log] });
    const exited = new Promise<never>((_, reject) => this.proc!.once("exit", (c) => reject(new Error(`test dockerd ${this.name} exited (${c}); ${this.logTail()}`))));
    exited.catch(() => {});
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const ok = await Promise.race([this.docker.ping().then(() => true, () => false), exited]);
      if (ok) return;
      if (Date.now() > deadline) throw new Error(`test dockerd ${this.name} did not answer in ${timeoutMs} ms; ${this.logTail()}`);
      // Polling a daemon that is starting: there is no readiness signal but its socket answering.
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /**
   * SIGKILLs dockerd and its containerd (the host's engine crashed); the
   * containers' shims live on, and the next containerd reconnects to them.
   * containerd goes too, and its pid file with it: orphaned, it dies on its
   * next log write to the dead dockerd, and where PID 1 does not reap orphans
   * (this VM's init does not) it stays a zombie that the next dockerd finds
   * "still running", cannot reach, and exits after a timeout.
   */
  async kill(): Promise<void> {
    await this.signal("SIGKILL");
    this.killContainerd();
  }

  /** Stops dockerd cleanly (it stops its containers and containerd). */
  async stop(): Promise<void> {
    await this.signal("SIGTERM");
  }

  /** Containers on this daemon labelled as owned by process `pid` (the worker under test). */
  async containersOf(pid: number): Promise<string[]> {
    const list = await this.docker.listContainers({ all: true, filters: { label: ["lego-rl.pid"] } });
    return list.filter((c) => (c.Labels["lego-rl.pid"] ?? "").startsWith(`${pid}:`)).map((c) => c.Id);
  }

  private async signal(sig: NodeJS.Signals): Promise<void> {
    const p = this.proc;
    this.proc = null;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    await new Promise<void>((r) => {
      p.once("exit", () => r());
      p.kill(sig);
    });
  }

  /** After the last stop: removes the bridge this daemon used (the data root stays as an image cache). */
  removeBridge(): void {
    if (this.proc) throw new Error(`test dockerd ${this.name} is still running; stop it before removing its bridge`);
    if (existsSync(`/sys/class/net/${this.bridge}`)) execFileSync("ip", ["link", "del", this.bridge]);
  }

  /** The bridge dockerd's `--bridge` names must exist with an IPv4 address before it starts. */
  private ensureBridge(): void {
    if (existsSync(`/sys/class/net/${this.bridge}`)) return;
    execFileSync("ip", ["link", "add", "name", this.bridge, "type", "bridge"]);
    execFileSync("ip", ["addr", "add", this.bridgeAddress, "dev", this.bridge]);
    execFileSync("ip", ["link", "set", this.bridge, "up"]);
  }

  /** The log's last lines, so a failure in CI says why without the file. */
  private logTail(lines = 15): string {
    let text = "";
    try {
      text = readFileSync(this.logFile, "utf8");
    } catch {
      return `no log at ${this.logFile}`;
    }
    return `last lines of ${this.logFile}:\n${text.trimEnd().split("\n").slice(-lines).join("\n")}`;
  }

  /** A dockerd of this name left by a killed test run: stop it, or its pid file blocks the start. */
  private stopLeftover(): void {
    if (!existsSync(this.pidFile)) return;
    const pid = Number(readFileSync(this.pidFile, "utf8").trim());
    let cmd = "";
    try {
      cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    } catch {
      // no such process: a stale pid file
    }
    if (cmd.includes(this.socket)) process.kill(pid, "SIGKILL");
    rmSync(this.pidFile, { force: true });
    this.killContainerd();
  }

  /** The containerd of this daemon's exec root, if one was left: SIGKILLed, its pid file removed. */
  private killContainerd(): void {
    const pidFile = `${this.execRoot}/containerd/containerd.pid`;
    let pid: number;
    try {
      pid = Number(readFileSync(pidFile, "utf8").trim());
    } catch {
      return;
    }
    killIfRunning(pid, "containerd");
    rmSync(pidFile, { force: true });
  }
}

/** SIGKILLs `pid` if it is still a process whose command line names `name` (pids are reused). */
function killIfRunning(pid: number, name: string): void {
  try {
    if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(name)) process.kill(pid, "SIGKILL");
  } catch {
    // already gone
  }
}
