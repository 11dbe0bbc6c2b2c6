import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureBaseImage } from "./base-image.ts";
import { Sandbox } from "./container.ts";
import { SandboxEnvError } from "./errors.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImages, leftoverContainers } from "./test-support.ts";


// Image builds (first run on a machine only) get their own long hook timeout.
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("Sandbox lifecycle against the real daemon", () => {
  let base: string;
  let sb: Sandbox;

  beforeAll(async () => {
    base = (await ensureBaseImage()).tag;
    sb = await Sandbox.start({ image: base, rolloutId: "lifecycle", stage: "agent" });
  });
  afterAll(async () => {
    await sb.remove();
    expect(await leftoverContainers()).toEqual([]);
  });

  it("execs as the non-root agent user with every capability dropped and no-new-privileges", async () => {
    const r = await sb.sh("id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status");
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toBe("1000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\n");
  });

  it("has only a loopback interface and no Docker socket", async () => {
    const r = await sb.sh("ls /sys/class/net; test -e /var/run/docker.sock && echo SOCKET || echo nosocket");
    expect(r.stdout).toBe("lo\nnosocket\n");
  });

  it("reports the exit code and separates stdout from stderr", async () => {
    const r = await sb.sh("echo out; echo err >&2; exit 7");
    expect(r).toMatchObject({ exitCode: 7, stdout: "out\n", stderr: "err\n", timedOut: false, truncated: false });
  });

  it("kills a command at its timeout, with its children", async () => {
    const r = await sb.sh("sleep 30 & sleep 30", { timeoutMs: 1000 });
    expect(r.timedOut).toBe(true);
    expect(r.ms).toBeLessThan(10_000);
    const ps = await sb.sh("pgrep -c sleep || true");
    expect(ps.stdout.trim()).toBe("0"); // the group died with it
  });

  it("caps captured output and says so", async () => {
    const r = await sb.sh("head -c 100000 /dev/zero | tr '\\0' x", { capBytes: 1000 });
    expect(r.stdout.length).toBe(1000);
    expect(r.truncated).toBe(true);
  });

  it("passes stdin to the command", async () => {
    const r = await sb.exec(["head", "-n1"], { stdin: "hello\n" });
    expect(r.stdout).toBe("hello\n");
  });

  it("streams stdout to onStdout as it is written, before the command ends, past the cap too", async () => {
    const seen: Array<{ text: string; at: number }> = [];
    const t0 = performance.now();
    const r = await sb.sh("echo first; sleep 1; echo second", { capBytes: 6, onStdout: (c) => seen.push({ text: c.toString(), at: performance.now() - t0 }) });
    const ended = performance.now() - t0;
    expect(seen.map((s) => s.text).join("")).toBe("first\nsecond\n");
    expect(seen[0]!.at).toBeLessThan(ended - 500); // the first line came a second before the end
    expect(r).toMatchObject({ exitCode: 0, stdout: "first\n", truncated: true });
  });

  it("rejects with the caller's own error when onStdout throws, and the sandbox stays usable", async () => {
    const oops = new Error("the caller's hook failed");
    await expect(sb.sh("echo a", { onStdout: () => { throw oops; } })).rejects.toBe(oops);
    expect((await sb.sh("echo still")).stdout).toBe("still\n");
  });

  it("copies files in and out as tar, keeping mode and owner", async () => {
    await sb.putFiles("/workspace", [
      { path: "pkg/a.py", content: Buffer.from("print(1)\n"), mode: 0o755, uid: 1000, gid: 1000 },
    ], { uid: 1000, gid: 1000 });
    const r = await sb.sh("stat -c '%U %a' pkg pkg/a.py && ./pkg/a.py", { workdir: "/workspace" });
    expect(r.stdout).toBe("agent 755\nagent 755\n");
    const out = await sb.getFiles("/workspace/pkg");
    expect(out.find((e) => e.path === "pkg/a.py")?.content.toString()).toBe("print(1)\n");
  });

  it("stops and removes; a call on a stopped container is container_died", async () => {
    const other = await Sandbox.start({ image: base, rolloutId: "lifecycle-stop", stage: "grading" });
    await other.stop(0);
    expect((await other.state()).running).toBe(false);
    await expect(other.sh("true")).rejects.toMatchObject({ kind: "container_died" });
    await other.remove();
    await other.remove(); // idempotent
  });

  it("types a missing image as a daemon error naming the image", async () => {
    const err = await Sandbox.start({ image: "lego-rl/none:missing", rolloutId: "x", stage: "agent" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxEnvError);
    expect((err as SandboxEnvError).kind).toBe("daemon_error");
    expect((err as SandboxEnvError).message).toContain("lego-rl/none:missing");
  });
});
