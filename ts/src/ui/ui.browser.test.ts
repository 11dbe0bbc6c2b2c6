/**
 * The Live UI in a real browser (Debian's Chromium driven by playwright-core) against the real
 * `lego ui` process over a run folder the real writers produce. Asserts what a user sees: the
 * curves with the right number of points, alerts with their messages, a trajectory arriving
 * live, opened turn by turn with its tokens coloured and its flag; a corrupt batch shows its
 * error without blanking the page; a missing run folder gives an error page. Screenshots go
 * to var/test-artifacts/ui/.
 */
import type { ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TextTokenizer } from "../proxy/index.ts";
import { QWEN3_DIR } from "../proxy/test-support.ts";
import { buildUiAssets } from "./index.ts";
import { batchRows, CHROMIUM, RunFolder, startLegoUi, stopLegoUi, TEXT_TURNS, textTrajectory } from "./test-support.ts";

const ARTIFACTS = resolve(import.meta.dirname, "../../../var/test-artifacts/ui");
/** Bound on every wait for the page: the run folder is polled every 100 ms, so seconds are plenty. */
const WAIT = { timeout: 15_000 };

let root: string;
let assets: string;
let browser: Browser;
let page: Page;
let run: RunFolder;
const procs: ChildProcess[] = [];

beforeAll(async () => {
  expect(existsSync(CHROMIUM), `${CHROMIUM} is missing: scripts/setup installs Debian's chromium`).toBe(true);
  mkdirSync(ARTIFACTS, { recursive: true });
  root = mkdtempSync(join(tmpdir(), "ui-browser-"));
  assets = await buildUiAssets(join(root, "assets"));
  run = new RunFolder(join(root, "run"));
  for (const s of [1, 2, 3]) run.step(s, s === 3 ? 0 : 1e-5);
  for (let seq = 0; seq < 5; seq++) run.batch(seq);
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"], timeout: 60_000 });
  const { url, proc } = await startLegoUi(["--run-dir", run.dir, "--assets-dir", assets, "--poll-ms", "100"]);
  procs.push(proc);
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.setDefaultTimeout(WAIT.timeout);
  await page.goto(url);
}, 180_000);

afterAll(async () => {
  await browser?.close();
  for (const p of procs) await stopLegoUi(p);
  if (root) rmSync(root, { recursive: true, force: true });
});

const points = (key: string) => page.locator(`#chart-${key.replace(/[^a-z0-9]+/gi, "-")}`);

describe("Live UI in Chromium", () => {
  it("shows the run overview, the curves with one point per step or batch, and the alerts with their messages", async () => {
    await expect.poll(() => page.locator("#stat-trajectories").textContent(), WAIT).toBe("20");
    expect(await page.locator("#stat-steps").textContent()).toBe("3");
    expect(await page.locator("#live").textContent()).toBe("live");
    expect(await points("mismatch/pearson_prob").getAttribute("data-points")).toBe("3");
    expect(await points("reward/mean").getAttribute("data-points")).toBe("5");
    expect(await points("throughput/tokens_per_s").getAttribute("data-points")).toBe("3");
    // uPlot drew into a real canvas of the chart's size.
    const canvas = points("reward/mean").locator("canvas");
    expect((await canvas.boundingBox())!.width).toBeGreaterThan(200);
    const lr = page.locator('.alert[data-kind="lr_zero"]');
    expect(await lr.locator(".message").textContent()).toContain("learning rate is zero");
    const hack = page.locator('.alert[data-kind="reward_hack_rate"]');
    expect(await hack.locator(".message").textContent()).toContain("open flagged trajectories");
    await page.screenshot({ path: join(ARTIFACTS, "overview.png"), fullPage: true });
  });

  it("shows a trajectory and a step that arrive while the page is open", async () => {
    run.batch(5, batchRows(5, "live"));
    run.step(4);
    await page.locator('tr.trajectory-row[data-id="live-0"]').waitFor(WAIT);
    await expect.poll(() => points("mismatch/pearson_prob").getAttribute("data-points"), WAIT).toBe("4");
    expect(await points("reward/mean").getAttribute("data-points")).toBe("6");
    expect(await page.locator("#stat-trajectories").textContent()).toBe("24");
    // The solve grids count the new rows too: 6 batches × 2 rollouts of fix-parser, all reward 0, by policy version 1.
    expect(await page.locator('#solve-grid-policy td[data-task="fix-parser"][data-column="v1"]').textContent()).toBe("0.00 (12)");
    expect(await page.locator('#solve-grid-harness td[data-task="add-flag"][data-column="reference"]').textContent()).toBe("1.00 (6)");
  });

  it("filters the table and opens a flagged trajectory turn by turn with its tokens coloured", async () => {
    await page.locator("#filter").fill("grader_tampering");
    await expect.poll(() => page.locator("tr.trajectory-row").count(), WAIT).toBe(6);
    await page.locator('tr.trajectory-row[data-id="live-0"]').click();
    const panel = page.locator('#trajectory[data-id="live-0"]');
    await panel.waitFor(WAIT);
    expect(await panel.locator("#traj-flags .flag").allTextContents()).toEqual(["grader_tampering"]);
    const t = batchRows(5, "live")[0]!;
    const seg = t.segments[0]!;
    expect(await panel.locator(".turn").count()).toBe(seg.turns.length);
    expect(await panel.locator(".seal").first().textContent()).toBe(seg.seal_reason);
    // Every trainable token is drawn as trainable, every prompt/template token as such.
    const trainable = seg.loss_mask.reduce((a, b) => a + b, 0);
    expect(await panel.locator(".segment .tok.trainable").count()).toBe(trainable);
    expect(trainable).toBeGreaterThan(0);
    expect(await panel.locator(".segment .tok.prompt, .segment .tok.template").count()).toBeGreaterThan(0);
    const first = panel.locator(".turn").first().locator(".tokens.completion .tok").first();
    expect(await first.getAttribute("class")).toBe(seg.loss_mask[seg.turns[0]!.completion_start] === 1 ? "tok trainable" : "tok sampled");
    expect(await first.getAttribute("title")).toContain(`token ${seg.token_ids[seg.turns[0]!.completion_start]}`);
    const bg = await panel.locator(".segment .tok.trainable").first().evaluate((el) => getComputedStyle(el).backgroundColor);
    expect(bg).not.toBe(await panel.locator(".segment .tok.prompt").first().evaluate((el) => getComputedStyle(el).backgroundColor));
    await panel.screenshot({ path: join(ARTIFACTS, "trajectory.png") });
  });

  it("a corrupt batch landing mid-run shows its error above the last good data", async () => {
    writeFileSync(join(run.dir, "spool", "00000000000000099-torn.lgrb"), "not a spool file");
    const banner = page.locator("#run-error");
    await banner.waitFor(WAIT);
    expect(await banner.textContent()).toContain("torn.lgrb");
    expect(await page.locator("#stat-trajectories").textContent()).toBe("24");
    await page.screenshot({ path: join(ARTIFACTS, "run-error.png") });
  });

  it("with --model-dir, shows each turn's text, the tool call the proxy's parser reads, and token pieces", async () => {
    const tokenizer = TextTokenizer.fromModelDir(QWEN3_DIR);
    const textRun = new RunFolder(join(root, "text-run"));
    textRun.batch(0, [textTrajectory("text-0", tokenizer)]);
    const { url, proc } = await startLegoUi(["--run-dir", textRun.dir, "--assets-dir", assets, "--model-dir", QWEN3_DIR]);
    procs.push(proc);
    const p = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    try {
      await p.goto(url);
      await p.locator('tr.trajectory-row[data-id="text-0"]').click({ timeout: WAIT.timeout });
      const turns = p.locator("#trajectory .turn");
      await expect.poll(() => turns.count(), WAIT).toBe(2);
      expect(await turns.nth(0).locator(".tool-call .tool-name").textContent()).toBe("bash");
      expect(JSON.parse((await turns.nth(0).locator(".tool-call .tool-args").textContent())!)).toEqual({ cmd: "pytest -q" });
      expect(await turns.nth(1).locator(".message .content").textContent()).toBe(TEXT_TURNS[1]!.completion);
      expect(await turns.nth(1).locator(".context-text pre").textContent()).toBe(TEXT_TURNS[1]!.context.replace(/^/, "\n"));
      // The completion's token spans spell its text piece by piece (spaces shown as ·).
      const pieces = await turns.nth(1).locator(".tokens.completion .tok").allTextContents();
      expect(pieces.join("").replace(/·/g, " ")).toBe(TEXT_TURNS[1]!.completion);
      await p.locator("#trajectory").screenshot({ path: join(ARTIFACTS, "trajectory-text.png") });
    } finally {
      await p.close();
    }
  });

  it("with --compare-dir, draws a second run's curves beside this run's", async () => {
    const mine = new RunFolder(join(root, "this-run"));
    for (const s of [1, 2, 3]) mine.step(s);
    mine.batch(0);
    const other = new RunFolder(join(root, "other-run"));
    other.step(1);
    other.step(2);
    other.batch(0);
    const { url, proc } = await startLegoUi(["--run-dir", mine.dir, "--compare-dir", other.dir, "--assets-dir", assets]);
    procs.push(proc);
    const p = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    try {
      await p.goto(url);
      await p.locator("#compare-legend").waitFor(WAIT);
      expect(await p.locator("#compare-legend code").textContent()).toBe(other.dir);
      const corr = p.locator("#chart-mismatch-pearson-prob");
      expect(await corr.getAttribute("data-points")).toBe("3");
      expect(await corr.getAttribute("data-compare-points")).toBe("2");
      expect(await p.locator("#chart-reward-mean").getAttribute("data-points")).toBe("1");
      expect(await p.locator("#chart-reward-mean").getAttribute("data-compare-points")).toBe("1");
      await p.screenshot({ path: join(ARTIFACTS, "compare.png"), fullPage: true });
    } finally {
      await p.close();
    }
  });

  it("a missing run folder gives an error page naming the folder and the fix", async () => {
    const missing = join(root, "no-such-run");
    const { url, proc } = await startLegoUi(["--run-dir", missing, "--assets-dir", assets]);
    procs.push(proc);
    const p = await browser.newPage();
    try {
      const res = await p.goto(url);
      expect(res!.status()).toBe(404);
      expect(await p.locator("#error-title").textContent()).toBe("Run folder not found");
      expect(await p.locator("#error-detail").textContent()).toContain(missing);
      expect(await p.locator("#error-fix").textContent()).toContain("--run-dir");
      await p.screenshot({ path: join(ARTIFACTS, "missing-run.png") });
    } finally {
      await p.close();
    }
  });
});
