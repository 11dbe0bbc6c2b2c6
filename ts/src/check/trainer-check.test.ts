/**
 * `lego check --trainer-address` against the real data-plane receiver (python -m lego_rl.transport
 * receive: the Receiver class the trainer's --receive binds), and against an address where
 * nothing listens.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../repo-root.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const PYTHON = join(REPO_ROOT, ".venv/bin/python");
const lego = (...args: string[]) => spawnSync(LEGO, ["check", "--min-free-gib", "0.1", ...args], { encoding: "utf8", timeout: 50_000 });

let dir = "";
let receiver: ChildProcess | null = null;
let address = "";

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "check-trainer-"));
  receiver = spawn(PYTHON, ["-m", "lego_rl.transport", "receive", "--bind", "tcp://127.0.0.1:*", "--spool", join(dir, "spool"), "--credits", "3"],
    { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "inherit"] });
  const first = await new Promise<string>((res, rej) => {
    createInterface({ input: receiver!.stdout! }).once("line", res);
    receiver!.once("exit", (code) => rej(new Error(`receiver exited with ${code} before listening`)));
  });
  address = (JSON.parse(first) as { address: string }).address;
}, 60_000);

afterAll(async () => {
  if (receiver && receiver.exitCode === null) {
    const exited = new Promise((r) => receiver!.once("exit", r));
    receiver.kill("SIGTERM");
    await exited;
  }
  rmSync(dir, { recursive: true, force: true });
});

describe("lego check --trainer-address", () => {
  it("passes when the receiver answers the hello with credits", { timeout: 60_000 }, () => {
    const r = lego("--trainer-address", address);
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain(`ok   trainer: receiver receiver at ${address} grants 3 credits`);
  });

  it("fails naming the fix when nothing answers", { timeout: 60_000 }, () => {
    const r = lego("--trainer-address", "tcp://127.0.0.1:9", "--engine-timeout-s", "2");
    expect(r.status).toBe(1);
    expect(r.stdout).toContain("FAIL trainer: no answer from a receiver at tcp://127.0.0.1:9 within 2 s");
    expect(r.stdout).toContain("fix: start the trainer with `--receive ADDR`");
  });

  it("is skipped without an address", { timeout: 60_000 }, () => {
    expect(lego().stdout).toContain("skip trainer: no --trainer-address");
  });
});
