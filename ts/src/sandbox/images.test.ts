import { beforeAll, describe, expect, it } from "vitest";
import { baseImageTag, ensureBaseImage } from "./base-image.ts";
import { parseAptSources, debianMirrorFor } from "./apt-sources.ts";
import { Sandbox } from "./container.ts";
import { TaskFormatError } from "./errors.ts";
import { pinDockerfile, ensureTaskImage, taskImageTag } from "./task-image.ts";
import { IMAGE_BUILD_TIMEOUT_MS, fixtureImage, fixtureImages, fixtureTask, leftoverContainers } from "./test-support.ts";


// Image builds (first run on a machine only) get their own long hook timeout.
beforeAll(fixtureImages, IMAGE_BUILD_TIMEOUT_MS);

describe("apt sources", () => {
  it("reads one-line and deb822 sources and picks the mirror serving the suite's main", () => {
    const deb822 = parseAptSources(
      "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n" +
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n",
      true,
    );
    const oneLine = parseAptSources("# x\ndeb [arch=amd64] http://mirror.example/debian bookworm main contrib\n", false);
    expect(debianMirrorFor("bookworm", deb822)).toBe("http://deb.debian.org/debian");
    expect(debianMirrorFor("bookworm", oneLine)).toBe("http://mirror.example/debian");
    expect(debianMirrorFor("trixie", deb822)).toBeUndefined();
  });
});

describe("images", () => {
  it("tags the base image by a hash of its inputs; a second ensure is a cache hit under 1 s", async () => {
    await ensureBaseImage();
    const again = await ensureBaseImage();
    expect(again.cached).toBe(true);
    expect(again.ms).toBeLessThan(1000);
    expect(again.tag).toBe(baseImageTag());
    expect(baseImageTag({ suite: "bookworm", packages: ["git", "python3"] })).not.toBe(baseImageTag());
    expect(baseImageTag({ suite: "bookworm", packages: ["python3", "git"] })).toBe(
      baseImageTag({ suite: "bookworm", packages: ["git", "python3"] }),
    );
  });

  it("builds a setup-script task image with the setup's history up to the base commit, owned by the agent", async () => {
    const { image } = await fixtureImage("fix-add");
    const sb = await Sandbox.start({ image: image.tag, rolloutId: "img", stage: "grading" });
    try {
      // The setup also committed the fix on branch `fix` (tag v1-fixed): cut at build.
      const r = await sb.sh("git log --oneline --all | wc -l; git tag; git branch; cat calc.py | head -2; stat -c %U calc.py .git/HEAD");
      expect(r.stdout).toBe("2\n* main\ndef add(a, b):\n    return a - b\nagent\nagent\n");
    } finally {
      await sb.remove();
    }
  });

  it("builds a Dockerfile task image from the local base without a registry, then hits the cache", async () => {
    const { task, image } = await fixtureImage("greet");
    expect(image.tag).toBe(taskImageTag(task));
    const again = await ensureTaskImage(task);
    expect(again).toMatchObject({ tag: image.tag, cached: true });
    expect(again.buildMs).toBeLessThan(1000);
  });

  it("refuses a Dockerfile FROM anything but lego-rl/base (it would need a registry)", () => {
    expect(pinDockerfile("FROM lego-rl/base\nRUN true", "lego-rl/base:abc", "t")).toBe("FROM lego-rl/base:abc\nRUN true");
    expect(() => pinDockerfile("FROM ubuntu:22.04", "lego-rl/base:abc", "t")).toThrow(TaskFormatError);
  });

  it("types a failing setup script as image_build_failed and leaves no build container", async () => {
    const task = fixtureTask("fix-add");
    const broken = { ...task, name: "broken", environment: { kind: "setup-script" as const, dir: `${task.dir}/tests` } };
    // tests/ has no setup.sh: bash exits 127.
    const err = await ensureTaskImage(broken).catch((e: unknown) => e);
    expect(err).toMatchObject({ name: "SandboxEnvError", kind: "image_build_failed" });
    expect(await leftoverContainers()).toEqual([]);
  });
});
