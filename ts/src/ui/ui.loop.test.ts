/**
 * The Live UI open in Chromium while a shortened real loop runs: `lego rollout` (reference
 * harness, scripted-gold engine, real Docker sandboxes on an easy task) ships a group over the
 * data plane to the real Python receiver, whose spool is the run folder `lego ui` serves. The
 * group's trajectories appear in the open page without a reload, with the grader's reward, and
 * one opens down to its tokens.
 */
import { execFile, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startReceiver } from "../rollout/test-support.ts";
import { ensureBaseImage } from "../sandbox/index.ts";
import { IMAGE_BUILD_TIMEOUT_MS, leftoverContainers } from "../sandbox/test-support.ts";
import type { JsonLineProcess } from "../json-line-process.ts";
import { buildUiAssets } from "./index.ts";
import { CHROMIUM, LEGO, startLegoUi, stopLegoUi } from "./test-support.ts";

const ARTIFACTS = resolve(import.meta.dirname, "../../../var/test-artifacts/ui");
const G = 2;

let root: string;
let browser: Browser;
let receiver: JsonLineProcess;
let address: string;
let ui: ChildProcess;
let url: string;

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  root = mkdtempSync(join(tmpdir(), "ui-loop-"));
  await ensureBaseImage();
  ({ receiver, address } = await startReceiver(join(root, "run", "spool")));
  const assets = await buildUiAssets(join(root, "assets"));
  ({ url, proc: ui } = await startLegoUi(["--run-dir", join(root, "run"), "--assets-dir", assets, "--poll-ms", "100"]));
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"], timeout: 60_000 });
}, IMAGE_BUILD_TIMEOUT_MS);

afterAll(async () => {
  await browser?.close();
  if (ui) await stopLegoUi(ui);
  receiver?.stop();
  expect(await leftoverContainers()).toEqual([]);
  if (root) rmSync(root, { recursive: true, force: true });
});

describe("Live UI during a shortened loop", () => {
  it("shows a real rollout group's trajectories as the receiver spools them", { timeout: 400_000 }, async () => {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    await page.goto(url);
    expect(await page.locator("#stat-trajectories").textContent({ timeout: 15_000 })).toBe("0");
    const { stdout } = await promisify(execFile)(LEGO, [
      "rollout", "--tasks", "easy:seed=7,count=1", "--harness", "reference", "--engine", "scripted-gold", "--group-size", String(G),
      "--concurrency", "2", "--trainer", address, "--spool-dir", join(root, "tx"), "--producer-id", "ui-loop",
    ], { timeout: 300_000, maxBuffer: 1 << 24 });
    const summary = JSON.parse(stdout.trim().split("\n").at(-1)!);
    expect(summary).toMatchObject({ event: "summary", trajectoriesShipped: G });
    // The page was not reloaded: the rows arrive over the event stream.
    const rows = page.locator("tr.trajectory-row");
    await expect.poll(() => rows.count(), { timeout: 15_000 }).toBe(G);
    expect(await page.locator("#stat-batches").textContent()).toBe("1");
    const row = rows.first();
    expect(await row.locator("td").nth(2).textContent()).toBe("reference/scripted-gold");
    expect(await row.locator("td").nth(3).textContent()).toBe("ok");
    expect(await row.locator("td").nth(4).textContent()).toBe("1");
    await row.click();
    const panel = page.locator("#trajectory");
    await panel.waitFor({ timeout: 15_000 });
    expect(await panel.getAttribute("data-id")).toBe(await row.getAttribute("data-id"));
    // The harness's real session: the policy's tokens drawn trainable, the rest as prompt or template.
    await expect.poll(() => panel.locator(".segment .tok.trainable").count(), { timeout: 15_000 }).toBeGreaterThan(0);
    expect(await panel.locator(".segment .tok.prompt, .segment .tok.template").count()).toBeGreaterThan(0);
    await page.screenshot({ path: join(ARTIFACTS, "loop.png"), fullPage: true });
    await page.close();
  });
});
