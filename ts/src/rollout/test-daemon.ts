/**
 * Test support: a second Docker daemon on this machine, owned by the test that
 * starts it. Its own socket, data root, exec root (so its own containerd) and
 * pid file; `--bridge=none --iptables=false --ip6tables=false`, so it creates
 * no bridge and never touches the main daemon's docker0 or iptables (sandboxes
 * run with --network none anyway). The data root is kept between runs, so an
 * image copied there once is a cache hit next time.
 */
import { spawn, type ChildProcess } from "node:child_process";
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

  /** `name` keeps two test files' daemons apart (paths under /run and /var/lib). */
  constructor(readonly name: string) {
    this.socket = `/run/lego-rl-test-dockerd-${name}.sock`;
    this.endpoint = `unix://${this.socket}`;
    this.dataRoot = `/var/lib/lego-rl-test-dockerd-${name}`;
    this.execRoot = `/run/lego-rl-test-dockerd-${name}`;
    this.pidFile = `/run/lego-rl-test-dockerd-${name}.pid`;
    this.logFile = `/tmp/lego-rl-test-dockerd-${name}.log`;
    this.docker = new Docker({ socketPath: this.socket });
  }

  /** Starts dockerd and resolves once it answers (bounded). A leftover of a killed test run is stopped first. */
  async start(timeoutMs = 60_000): Promise<void> {
    if (this.proc) throw new Error(`test dockerd ${this.name} already running`);
    this.stopLeftover();
    mkdirSync(this.dataRoot, { recursive: true });
    const log = openSync(this.logFile, "a");
    this.proc = spawn("dockerd", [
      "--host", this.endpoint, "--data-root", this.dataRoot, "--exec-root", this.execRoot, "--pidfile", this.pidFile,
      "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false", "--storage-driver", "overlay2",
    ], { stdio: ["ignore", log, log] });
    const exited = new Promise<never>((_, reject) => this.proc!.once("exit", (c) => reject(new Error(`test dockerd ${this.name} exited (${c}); see ${this.logFile}`))));
    exited.catch(() => {});
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const ok = await Promise.race([this.docker.ping().then(() => true, () => false), exited]);
      if (ok) return;
      if (Date.now() > deadline) throw new Error(`test dockerd ${this.name} did not answer in ${timeoutMs} ms; see ${this.logFile}`);
      // Polling a daemon that is starting: there is no readiness signal but its socket answering.
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /** SIGKILLs dockerd (a crash): its containerd and the containers' shims live on until it restarts. */
  async kill(): Promise<void> {
    await this.signal("SIGKILL");
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
  }
}
