import { beforeAll, describe, expect, it } from "vitest";
import { fixtureImages, IMAGE_BUILD_TIMEOUT_MS } from "./test-support.ts";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { ensureBaseImage } from "./base-image.ts";
import { Sandbox } from "./container.ts";
import { dockerClient } from "./docker.ts";
import { containersOfProcess, containersOfRun, reapDeadRuns } from "./reaper.ts";
import { LABEL, OWNER } from "./types.ts";

const HOLDER = fileURLToPath(new URL("./fixtures/hold-containers.ts", import.meta.url));
const TS_ROOT = fileURLToPath(new URL("../../", import.meta.url));


// Image builds (first run on a machine only) get their own long hook timeout.
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("reaper", () => {
  it("removes every container of a run that was killed, and keeps a live run's", async () => {
    const { tag } = await ensureBaseImage();
    const mine = await Sandbox.start({ image: tag, rolloutId: "live", stage: "agent" });
    const runId = `killed-${process.pid}`;
    // node itself is the child (tsx as a loader, no wrapper process), so the
    // process that labelled the containers is the one we kill and reap.
    const child = spawn(process.execPath, ["--import", "tsx", HOLDER, "3"], {
      cwd: TS_ROOT, // where `tsx` resolves from
      env: { ...process.env, LEGO_RUN_ID: runId },
      stdio: ["ignore", "pipe", "inherit"],
    });
    const [line] = (await once(child.stdout, "data")) as [Buffer];
    expect(line.toString().trim().split(" ")).toHaveLength(3);
    expect(await containersOfRun(runId)).toHaveLength(3);
    // Found by their creator's pid (the label is PID:START, which the daemon's exact filter cannot match).
    expect((await containersOfProcess(child.pid!)).sort()).toEqual((await containersOfRun(runId)).sort());
    expect(await containersOfProcess(process.pid)).toEqual([mine.id]);
    // SIGKILL: nothing gets to clean up.
    child.kill("SIGKILL");
    await once(child, "exit");

    const report = await reapDeadRuns();
    expect(await containersOfRun(runId)).toEqual([]);
    expect(await containersOfProcess(child.pid!)).toEqual([]);
    expect(report.removed.length).toBeGreaterThanOrEqual(3);
    expect((await mine.state()).running).toBe(true);
    await mine.remove();
  });

  it("leaves a `docker build` step alone: it carries the base image's owner label but no owning process", async () => {
    const { tag } = await ensureBaseImage();
    // What the daemon's builder creates for a RUN step of a Dockerfile FROM the base image.
    const step = await dockerClient().createContainer({
      Image: tag,
      Cmd: ["sleep", "30"],
      Labels: { [LABEL.owner]: OWNER, [LABEL.imageKind]: "base" },
      HostConfig: { NetworkMode: "none" },
    });
    try {
      const report = await reapDeadRuns();
      expect(report.removed).not.toContain(step.id);
      expect((await step.inspect()).Id).toBe(step.id);
    } finally {
      await step.remove({ force: true });
    }
  });
});
