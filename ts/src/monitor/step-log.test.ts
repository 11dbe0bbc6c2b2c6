/** A trainer step log (the driver's JSON lines) replayed through the monitor. */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { Monitor, monitorStepLog, StepLogError } from "./index.ts";

let dir: string | undefined;
afterEach(() => { if (dir) rmSync(dir, { recursive: true, force: true }); });

const line = (step: number, lr: number) =>
  JSON.stringify({ step, batch_id: `b-${step}`, policy_version: step, "optim/lr": lr, "optim/grad_norm": 0.4, "batch/staleness_max": 0 });

describe("step log monitor", () => {
  it("raises lr_zero from the step log and appends it to the alert log", () => {
    dir = mkdtempSync(join(tmpdir(), "mon-"));
    const steps = join(dir, "steps.jsonl");
    const alerts = join(dir, "alerts.jsonl");
    writeFileSync(steps, [1, 2, 3, 4].map((s) => line(s, s < 4 ? 1e-5 : 0)).join("\n") + "\n");
    const raised = monitorStepLog(new Monitor(), steps, alerts);
    expect(raised.map((a) => a.kind)).toEqual(["lr_zero"]);
    const logged = readFileSync(alerts, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(logged).toMatchObject([{ kind: "lr_zero", at: 4 }]);
  });

  it("is silent on a healthy step log", () => {
    dir = mkdtempSync(join(tmpdir(), "mon-"));
    const steps = join(dir, "steps.jsonl");
    writeFileSync(steps, [1, 2, 3, 4, 5].map((s) => line(s, 1e-5)).join("\n") + "\n");
    expect(monitorStepLog(new Monitor(), steps)).toEqual([]);
  });

  it("names the line of a malformed record", () => {
    dir = mkdtempSync(join(tmpdir(), "mon-"));
    const steps = join(dir, "steps.jsonl");
    writeFileSync(steps, `${line(1, 1e-5)}\n{not json\n`);
    expect(() => monitorStepLog(new Monitor(), steps)).toThrow(StepLogError);
    expect(() => monitorStepLog(new Monitor(), steps)).toThrow(/line 2/);
  });
});

describe("lego monitor replay", () => {
  it("prints the alert a crafted step log raises as JSON", { timeout: 60_000 }, () => {
    dir = mkdtempSync(join(tmpdir(), "mon-"));
    const steps = join(dir, "steps.jsonl");
    writeFileSync(steps, [1, 2, 3].map((s) => line(s, s < 3 ? 1e-5 : 0)).join("\n") + "\n");
    const r = spawnSync(resolve(import.meta.dirname, "../../bin/lego"), ["monitor", "replay", steps], { encoding: "utf8", timeout: 50_000 });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim().split("\n").map((l) => JSON.parse(l).kind)).toEqual(["lr_zero"]);
  });
});
