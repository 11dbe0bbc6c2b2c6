/**
 * execd, the task container's main process (in-container/execd.c), runs the
 * agent user's commands in place of `docker exec`: it must give them exactly
 * what `docker exec` gives, carry their bytes intact, and stay out of the
 * agent's reach, since it holds the capabilities to start them.
 */
import { createHash } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureBaseImage } from "./base-image.ts";
import { Sandbox } from "./container.ts";
import { execServerHostDir } from "./exec-server.ts";
import { configureSandboxHost } from "./host-settings.ts";
import { leftoverContainers } from "./test-support.ts";

describe("execd, the command server inside task containers", () => {
  let base: string;
  let served: Sandbox;
  let viaDocker: Sandbox;

  beforeAll(async () => {
    base = (await ensureBaseImage()).tag;
    served = await Sandbox.start({ image: base, rolloutId: "execd", stage: "agent" });
    const before = configureSandboxHost({ execServer: false });
    try {
      viaDocker = await Sandbox.start({ image: base, rolloutId: "execd-off", stage: "agent" });
    } finally {
      configureSandboxHost(before);
    }
  });
  afterAll(async () => {
    await served?.remove();
    await viaDocker?.remove();
    expect(await leftoverContainers()).toEqual([]);
  });

  it("runs a command as `docker exec` would: user, groups, capabilities, seccomp, limits, umask, environment, directory", async () => {
    const probe = [
      "id",
      "grep -E '^(Cap|Groups|NoNewPrivs|Seccomp)' /proc/self/status",
      "ulimit -a",
      "umask",
      "pwd",
      "env | grep -v ^HOSTNAME= | sort",
      "cat /proc/self/cgroup | sed 's/[0-9a-f]\\{64\\}/ID/'",
    ].join("; ");
    const opts = { env: { EXTRA: "x=y" }, workdir: "/tmp" };
    const [a, b] = await Promise.all([served.sh(probe, opts), viaDocker.sh(probe, opts)]);
    expect(served.ownMountPoints()).toEqual(["/opt/lego-exec"]); // the first one is served
    expect(viaDocker.ownMountPoints()).toEqual([]);
    expect(a.exitCode).toBe(0);
    expect(a.stdout).toContain("CapBnd:\t0000000000000000");
    expect(a.stdout).toContain("EXTRA=x=y");
    expect(a.stdout).toBe(b.stdout);
  });

  it("the agent's uid can neither signal nor inspect execd, so it cannot stop the container", async () => {
    const r = await served.sh([
      "pid=$(pgrep -x execd)",
      "kill -KILL $pid 2>/dev/null && echo killed-execd",
      "kill -KILL 1 2>/dev/null && echo killed-init",
      "ls /proc/$pid/fd >/dev/null 2>&1 && echo read-fds",
      "cat /proc/$pid/environ >/dev/null 2>&1 && echo read-environ",
      "echo done",
    ].join("; "));
    expect(r.stdout).toBe("done\n");
    expect((await served.state()).running).toBe(true);
    expect((await served.sh("echo still")).stdout).toBe("still\n");
  });

  it("root commands go through `docker exec` (execd refuses them), with the container's capabilities: execd's four", async () => {
    const r = await served.exec(["sh", "-c", "id -u; grep CapEff /proc/self/status"], { user: "0:0" });
    expect(r.stdout).toBe("0\nCapEff:\t00000000000001e0\n"); // KILL 5, SETGID 6, SETUID 7, SETPCAP 8
  });

  it("runs many commands at once, each with only its own output", async () => {
    const runs = await Promise.all(
      Array.from({ length: 16 }, (_, i) => served.sh(`for n in $(seq 300); do echo ${i}-$n; echo e${i} >&2; done`)),
    );
    runs.forEach((r, i) => {
      expect(r.stdout).toBe(Array.from({ length: 300 }, (_, n) => `${i}-${n + 1}\n`).join(""));
      expect(r.stderr).toBe(`e${i}\n`.repeat(300));
    });
  });

  it("carries megabytes of output intact, and stdin larger than a pipe's buffer", async () => {
    const r = await served.sh("head -c 2000000 /dev/urandom | base64 -w0 | tee /tmp/r.b64; sha256sum < /tmp/r.b64 >&2", { capBytes: 4 << 20 });
    expect(r.stdout.length).toBe(2666668);
    expect(r.stderr.split(" ")[0]).toBe(createHash("sha256").update(r.stdout).digest("hex"));
    const big = Buffer.alloc(1 << 20, 7);
    expect((await served.exec(["wc", "-c"], { stdin: big })).stdout.trim()).toBe(String(big.length));
  });

  it("a program that is not there exits 126 saying so, as with `docker exec`", async () => {
    const r = await served.exec(["no-such-program"]);
    expect(r.exitCode).toBe(126);
    expect(r.stderr).toContain('"no-such-program": executable file not found in $PATH');
    const cwd = await served.exec(["pwd"], { workdir: "/no/such/dir" });
    expect(cwd).toMatchObject({ exitCode: 126, stdout: "" });
    expect(cwd.stderr).toContain("/no/such/dir");
  });

  it("a file without a shebang fails as under `docker exec` (exec format error), not run by /bin/sh", async () => {
    const script = "printf 'echo ran\\n' > /workspace/no-shebang && chmod +x /workspace/no-shebang"; // /tmp is noexec
    await Promise.all([served.sh(script), viaDocker.sh(script)]);
    const [a, b] = await Promise.all([served.exec(["/workspace/no-shebang"]), viaDocker.exec(["/workspace/no-shebang"])]);
    expect(a).toMatchObject({ exitCode: b.exitCode, stdout: "" });
    expect(a.stderr).toContain("exec format error");
    expect(b.stderr).toContain("exec format error");
  });

  it("the agent's /etc cannot give a command more groups or point execd at its own streams", async () => {
    const box = await Sandbox.start({ image: base, rolloutId: "execd-etc", stage: "agent" });
    try {
      // A task image whose /etc the agent may rewrite (root opens it up through `docker exec`).
      await box.exec(["chmod", "777", "/etc"], { user: "0:0" });
      await box.exec(["chmod", "666", "/etc/group"], { user: "0:0" });
      const forged = await box.sh("echo 'r:x:0:agent' >> /etc/group && rm /etc/passwd && ln -s /proc/$(pgrep -x execd)/fd/0 /etc/passwd && echo forged");
      expect(forged.stdout).toBe("forged\n");
      const r = await box.sh("id -G", { timeoutMs: 20_000 });
      expect(r).toMatchObject({ exitCode: 0, stdout: "1000\n", timedOut: false });
      expect((await box.sh("echo still", { timeoutMs: 20_000 })).stdout).toBe("still\n");
    } finally {
      await box.remove();
    }
  });

  it("bad input is refused before anything runs, and the sandbox stays usable", async () => {
    await expect(served.exec(["echo", "a\0b"])).rejects.toThrow(/NUL byte/);
    await expect(served.exec(["env"], { env: { "A=B": "1" } })).rejects.toThrow(/holds '='/);
    expect((await served.sh("echo fine")).stdout).toBe("fine\n");
  });

  it("a container that dies under a command is container_died, at once", async () => {
    const doomed = await Sandbox.start({ image: base, rolloutId: "execd-doomed", stage: "agent" });
    try {
      const t0 = performance.now();
      const running = expect(doomed.sh("sleep 60", { timeoutMs: 120_000 })).rejects.toMatchObject({ kind: "container_died" });
      await doomed.sh("true"); // the sleep has been sent
      await doomed.container.kill();
      await running;
      expect(performance.now() - t0).toBeLessThan(30_000); // not the 70 s the host waits for a silent execd
    } finally {
      await doomed.remove();
    }
  });
});

describe("the built execd", () => {
  it("is used only from a folder of this user that nobody else can write", () => {
    const state = mkdtempSync(join(tmpdir(), "lego-execd-state-"));
    const before = configureSandboxHost({ stateDir: state });
    try {
      mkdirSync(join(state, "execd"));
      chmodSync(join(state, "execd"), 0o777); // as if planted in a shared place
      expect(() => execServerHostDir()).toThrow(/only it can write: remove it/);
      expect(() => execServerHostDir()).toThrow(join(state, "execd")); // names what to remove
    } finally {
      configureSandboxHost(before);
      rmSync(state, { recursive: true, force: true });
    }
  });
});
