/**
 * `lego demo`: the whole loop on a laptop-sized CPU machine.
 *
 *   demonstrations (cached) -> supervised warm start -> held-out eval (before)
 *   -> GSPO: engine <- proxy <- reference harness in Docker sandboxes -> receiver -> Ray trainer -> weights -> engine
 *   -> held-out eval (after, same tasks and sampling settings) -> report (markdown + PNG)
 *
 * Every stage is a real process of the product: `python -m lego_rl.engine`,
 * `python -m lego_rl.cluster.train --receive` (GSPO with routing replay on local
 * Ray, pushing each version to the engine), `lego rollout` and `lego eval`. The
 * reward of every rollout is the task's own tests run by the grader in the sandbox.
 *
 * `harness` other than `reference` (the second demo mode) runs the same stages in
 * that harness; the warm start is on the reference harness's format, so a tiny
 * model there usually scores 0 and no group has the reward variance an update needs.
 * The report says so (updates: 0) rather than pretending to learn.
 */
import { spawn, spawnSync } from "node:child_process";
import { createWriteStream, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { REPO_ROOT } from "../repo-root.ts";
import { containersOfProcess } from "../sandbox/index.ts";
import { defaultTasksConfig, openTaskSource, type EvalReport } from "../tasks/index.ts";
import { assetsBuilt, DEFAULT_ASSETS_DIR, TokenText, UiServer } from "../ui/index.ts";
import { JsonLineProcess, PYTHON } from "../json-line-process.ts";
import { evaluateHeldOut, type HeldOutEval } from "./evaluate.ts";
import { DEMO_TASKS, EVAL_TASKS, TRAIN_TASKS, baseModel, defaultCacheRoot, ensureDemonstrations, warmStart, type SftSummary } from "./warm-start.ts";

const LEGO = join(REPO_ROOT, "ts/bin/lego");

export interface RealLoopOptions {
  workDir: string;
  /** GSPO steps: one task group each. */
  steps: number;
  groupSize: number;
  concurrency: number;
  /** Warm-start steps: a cap when `sftStopAt` is set. */
  sftSteps: number;
  /** Stop the warm start once the demonstrations' mean whole-action probability reaches this (null: run every step). */
  sftStopAt: number | null;
  sftLr: number;
  sftBatch: number;
  /** Seed of the tiny model's initialisation and of the warm start's demonstration order. */
  seed: number;
  /** GSPO learning rate. */
  lr: number;
  /** How the trainer adds token losses up (`cluster.train --loss-aggregation`; python-bridge/lego_rl/trainer/losses.py). */
  lossAggregation: "sequence_mean" | "token_sum_norm";
  /** Linear learning-rate warm-up over the first N GSPO updates (`cluster.train --warmup-steps`). */
  warmupSteps: number;
  /** Only the parameters whose name this matches are updated by GSPO (`cluster.train --trainable-parameters`); null: all. */
  trainableParameters: string | null;
  /** The harness of the GSPO rollouts and of both evaluations. */
  harness: string;
  /** Task source of the demonstrations (the warm start). */
  demoTasks: string;
  /** Task source of the GSPO rollouts: its first `steps` tasks, one group each. */
  tasks: string;
  /** Task source of the evaluations: its `test` split when it has one (held out), else every task. */
  evalTasks: string;
  eval: Omit<HeldOutEval, "tasks" | "harness" | "split">;
  /** Serve the Live UI over the run folder while the run lasts (its address is printed). */
  ui: boolean;
  /** Bound of the GSPO stage (rollout worker + trainer), ms: past it the run stops with an error, never hangs. */
  gspoBoundMs: number;
  log: (line: string) => void;
}

export const DEFAULT_LOOP: Omit<RealLoopOptions, "workDir" | "log"> = {
  // Measured on 2026-12-06 (docs/demo.md, "Held out for real"): one task group per step over TRAIN_TASKS' 65;
  // the training reward was still rising at 48 steps.
  steps: 64,
  groupSize: 8,
  concurrency: 4,
  // The warm start stops when the demonstrations' whole action is said with mean probability 0.1: the tiny
  // model jumps from ~0 to ~0.9 on held-out tasks within ~10 SFT steps, at a step that moves with the seed
  // (160 fixed steps: 0.20 on seed 0, 0.78 on seed 1); stopping there left both at 0.15-0.20. 300: a cap.
  sftSteps: 300,
  sftStopAt: 0.1,
  sftLr: 1e-2,
  sftBatch: 2,
  seed: 0,
  // GSPO updates the final norm's 128 gains alone: with every weight trainable, a rate that moves the policy
  // in these steps collapsed it (AdamW's first steps move each weight by ~lr), and one that did not barely moved
  // it; the norm alone takes a high rate safely. Figures: docs/demo.md, "Calibration" and "Held out for real".
  lr: 3e-1,
  lossAggregation: "token_sum_norm",
  warmupSteps: 0,
  trainableParameters: "^model\\.norm\\.",
  harness: "reference",
  demoTasks: DEMO_TASKS,
  tasks: TRAIN_TASKS,
  evalTasks: EVAL_TASKS,
  // 8 samples of each of the 13 held-out tasks: with 4, two evaluations of the same model differed by up to 0.1.
  eval: { k: 8, maxTokensPerTurn: 96, maxTurns: 3, temperature: 1 },
  ui: true,
  gspoBoundMs: 3_600_000,
};

/**
 * `lego demo --harness H` for H other than `reference`: the same stages in H. The warm start is
 * on the reference harness's demonstrations, so in another harness (another system prompt, tool
 * set and call format) the tiny model is expected to score 0 in every rollout, and a group whose
 * rewards are all equal gives GSPO nothing to update: the run shows the loop working in H and
 * reports that honestly, it does not show learning. A rollout there can also take the sandbox's
 * whole wall clock (OpenCode retries a cut-off reply until then, docs/harnesses.md), so the
 * defaults are short: 2 groups of 4, one sample per held-out task.
 */
export const HARNESS_LOOP: Omit<RealLoopOptions, "workDir" | "log" | "harness"> = {
  ...DEFAULT_LOOP,
  steps: 2,
  groupSize: 4,
  concurrency: 2,
  eval: { ...DEFAULT_LOOP.eval, k: 1 },
};

export interface DemoSummary {
  bench: "demo";
  harness: string;
  reward_before: number;
  reward_after: number;
  reward_gain: number;
  /** Held-out pass@k (k = the evaluation's samples per task) before and after: flat or falling while pass@1 rises means GSPO concentrated the policy on what it already did. */
  pass_at_k_before: number;
  pass_at_k_after: number;
  k: number;
  min_pearson: number | null;
  /** GSPO steps that updated the weights (a group with identical rewards updates nothing). */
  updates: number;
  /** Sandbox containers the run's processes left behind (0 unless a sandbox leaked). */
  containers_left: number;
  minutes: number;
  report: string;
}

interface StepLine {
  step: number;
  policy_version: number;
  "batch/groups_trained"?: number;
  "rollout/reward_mean"?: number;
  "mismatch/pearson_prob"?: number;
  "mismatch/k3_kl"?: number;
  "rollout/turns_mean"?: number;
  "rollout/tool_calls_mean"?: number;
  "time/step_s": number;
}

export class DemoError extends Error {}

function readSteps(path: string): StepLine[] {
  if (!existsSync(path)) return [];
  return readFileSync(path, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l) as StepLine);
}

function stepLine(s: StepLine): string {
  const f = (v: number | undefined, d: number) => (v === undefined ? "-" : v.toFixed(d));
  return `  step ${String(s.step).padStart(2)}  v${s.policy_version}  reward ${f(s["rollout/reward_mean"], 3)}  ` +
    `Pearson ${f(s["mismatch/pearson_prob"], 6)}  k3 KL ${f(s["mismatch/k3_kl"], 5)}  turns ${f(s["rollout/turns_mean"], 1)}  ` +
    `tool calls ${f(s["rollout/tool_calls_mean"], 1)}  ${s["batch/groups_trained"] ? "" : "(identical rewards: no update) "}${s["time/step_s"].toFixed(1)} s`;
}

/** A child process whose output goes to files; resolves with its exit code. */
function spawnLogged(command: string, args: string[], out: string, err: string, onErrLine?: (l: string) => void, onOutLine?: (l: string) => void) {
  const proc = spawn(command, args, { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, RAY_AUTH_MODE: "disabled" }, detached: true });
  const outFile = createWriteStream(out);
  const errFile = createWriteStream(err);
  createInterface({ input: proc.stdout! }).on("line", (l) => { outFile.write(`${l}\n`); onOutLine?.(l); });
  createInterface({ input: proc.stderr! }).on("line", (l) => { errFile.write(`${l}\n`); onErrLine?.(l); });
  const exited = new Promise<number>((resolve, reject) => {
    proc.on("error", reject);
    proc.on("close", (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
  const stop = () => { if (proc.exitCode === null && proc.pid) try { process.kill(-proc.pid, "SIGTERM"); } catch { /* already gone */ } };
  return { proc, exited, stop };
}

/** Resolves with `p`, or rejects with a DemoError saying `what` once `ms` have passed. */
function bounded<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new DemoError(`${what} did not end within ${Math.round(ms / 1000)} s`)), ms); });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** GSPO on the training tasks: engine + Ray trainer receiving + one rollout worker; returns the final model directory. */
async function rl(opts: RealLoopOptions, model: string, run: string, pids: number[]): Promise<{ finalModel: string; steps: StepLine[] }> {
  const engine = new JsonLineProcess("engine", PYTHON, ["-m", "lego_rl.engine", "--model", model, "--bind", "tcp://127.0.0.1:*"]);
  let trainer: ReturnType<typeof spawnLogged> | undefined;
  let worker: ReturnType<typeof spawnLogged> | undefined;
  const stepsLog = join(run, "steps.jsonl");
  try {
    const engineAddress = (await engine.waitFor((e) => e.type === "listening", 180_000)).address as string;
    let announce: (a: string) => void = () => {};
    const receiving = new Promise<string>((resolve) => { announce = resolve; });
    trainer = spawnLogged(PYTHON, [
      "-m", "lego_rl.cluster.train", "--model", model, "--checkpoints", join(run, "checkpoints"),
      // The receiver's spool is under spool/, where the Live UI and `lego mcp` read a run's batches.
      "--receive", "tcp://127.0.0.1:*", "--receiver-spool", join(run, "spool", "receiver"), "--max-steps", String(opts.steps),
      "--weights-dir", join(run, "weights"), "--sync-engine", engineAddress, "--log", stepsLog, "--lr", String(opts.lr),
      "--loss-aggregation", opts.lossAggregation, "--warmup-steps", String(opts.warmupSteps),
      ...(opts.trainableParameters !== null ? ["--trainable-parameters", opts.trainableParameters] : []),
    ], join(run, "trainer.out"), join(run, "trainer.err"), (l) => { if (l.startsWith("trainer: receiving on ")) announce(l.split(" ").at(-1)!); });
    const trainerGone = trainer.exited.then((code) => { throw new DemoError(`the trainer exited (${code}) early; see ${join(run, "trainer.err")}`); });
    const receiverAddress = await bounded(Promise.race([receiving, trainerGone]), 300_000, "the trainer's start");
    opts.log(`GSPO: engine ${engineAddress}, trainer receiving on ${receiverAddress}; ${opts.steps} groups of ${opts.groupSize} rollouts (${opts.harness} harness)`);
    let shown = 0;
    const showSteps = () => {
      const all = readSteps(stepsLog);
      for (const s of all.slice(shown)) opts.log(stepLine(s));
      shown = all.length;
    };
    worker = spawnLogged(LEGO, [
      "rollout", "--tasks", opts.tasks, "--limit", String(opts.steps), "--harness", opts.harness, "--engine", engineAddress, "--model-dir", model,
      "--temperature", String(opts.eval.temperature), "--max-tokens-per-turn", String(opts.eval.maxTokensPerTurn), "--max-turns", String(opts.eval.maxTurns),
      "--group-size", String(opts.groupSize), "--concurrency", String(opts.concurrency), "--trainer", receiverAddress,
      // On-policy: each group samples with the weights the trainer then updates. With groups overlapping
      // (--max-staleness 1), measured: 50-75 % of a step's rollouts were sampled by the previous version,
      // Pearson fell to 0.993 from that policy lag alone, and GSPO's 3e-4 clip cut 42-66 % of the tokens.
      "--on-policy",
      "--spool-dir", join(run, "sender"), "--producer-id", "demo",
    ], join(run, "rollout.out"), join(run, "rollout.err"), undefined, (l) => {
      if (l.includes('"group_shipped"')) showSteps();
    });
    if (worker.proc.pid) pids.push(worker.proc.pid);
    const started = Date.now();
    const workerCode = await bounded(worker.exited, opts.gspoBoundMs, "the rollout worker");
    if (workerCode !== 0) throw new DemoError(`the rollout worker exited with ${workerCode}; see ${join(run, "rollout.err")}`);
    const left = Math.max(60_000, opts.gspoBoundMs - (Date.now() - started));
    const trainerCode = await bounded(trainer.exited, Math.min(left, 600_000), "the trainer, after the last group was shipped");
    if (trainerCode !== 0) throw new DemoError(`the trainer exited with ${trainerCode}; see ${join(run, "trainer.err")}`);
    showSteps();
  } finally {
    worker?.stop();
    trainer?.stop();
    engine.stop();
  }
  const steps = readSteps(stepsLog);
  const version = Math.max(0, ...steps.map((s) => s.policy_version));
  const finalModel = version > 0 ? join(run, "weights", `v${version}`) : model;
  return { finalModel, steps };
}

function phase<T>(seconds: Record<string, number>, name: string, f: () => Promise<T>): Promise<T> {
  const t0 = Date.now();
  return f().finally(() => { seconds[name] = (Date.now() - t0) / 1000; });
}

const describeEval = (r: EvalReport, heldOut: boolean) =>
  `pass@1 ${r.pass1.toFixed(3)} on ${r.scores.length} ${heldOut ? "held-out " : ""}tasks x ${r.k} samples (${JSON.stringify(r.statuses)})`;

/** The Live UI over the run folder, in this process; stopped at the end of the run. */
async function startUi(run: string, modelDir: string, log: (l: string) => void): Promise<UiServer | undefined> {
  if (!assetsBuilt(DEFAULT_ASSETS_DIR)) {
    // Building the page takes a minute of CPU the run needs; scripts/setup builds it.
    log(`Live UI: the page is not built (scripts/setup builds it); afterwards: ts/bin/lego ui --run-dir ${run} --model-dir ${modelDir}`);
    return undefined;
  }
  // Port 0: any free port, so two demos (or a demo and a `lego ui`) never collide; the URL says which.
  const server = new UiServer({ runDir: run, host: "127.0.0.1", port: 0, assetsDir: DEFAULT_ASSETS_DIR, pollMs: 1000, text: TokenText.fromModelDir(modelDir) });
  log(`Live UI (open while the run lasts): ${await server.listen()}`);
  return server;
}

/**
 * Opens both task sources before anything runs (a bad source is a clear error, not a failure
 * minutes in); says whether the evaluation source has a `test` split: then only it is evaluated
 * (held out), else every task.
 */
async function checkSources(opts: RealLoopOptions): Promise<{ heldOut: boolean }> {
  const open = async (flag: string, source: string) => {
    try {
      const set = await openTaskSource(source, defaultTasksConfig());
      if (!set.tasks.length) throw new Error("it holds no task");
      return set.tasks;
    } catch (error) {
      throw new DemoError(`${flag} ${source}: ${error instanceof Error ? error.message : String(error)}`);
    }
  };
  await open("--tasks", opts.tasks);
  const evalTasks = await open("--eval-tasks", opts.evalTasks);
  return { heldOut: evalTasks.some((t) => t.split === "test") };
}

export async function runRealLoop(opts: RealLoopOptions): Promise<DemoSummary> {
  const started = Date.now();
  const run = opts.workDir;
  for (const d of ["checkpoints", "receiver", "spool", "weights", "sender", "steps.jsonl"]) rmSync(join(run, d), { recursive: true, force: true });
  mkdirSync(join(run, "spool"), { recursive: true });
  const seconds: Record<string, number> = {};
  const pids: number[] = [];
  opts.log(`lego demo: the whole loop (${opts.harness} harness in Docker sandboxes -> proxy -> Python engine -> GSPO on Ray -> weights back); run folder ${run}`);
  const { heldOut } = await checkSources(opts);
  let startModel: string;
  let sft: SftSummary | undefined;
  if (opts.sftSteps > 0) {
    const demos = await phase(seconds, "demonstrations", () => ensureDemonstrations({ cacheRoot: defaultCacheRoot(), tasks: opts.demoTasks, log: opts.log }));
    opts.log(`demonstrations: ${demos.manifest.trajectories} (${demos.manifest.harness}, ${demos.manifest.tasks}) in ${demos.dir}`);
    sft = await phase(seconds, "warm start", async () =>
      warmStart({ workDir: run, demonstrations: demos.dir, steps: opts.sftSteps, lr: opts.sftLr, batch: opts.sftBatch, seed: opts.seed, stopAt: opts.sftStopAt ?? undefined }));
    opts.log(`warm start: ${sft.steps} SFT steps, loss ${sft.loss_first.toFixed(3)} -> ${sft.loss_last.toFixed(3)}` +
      (sft.action_probability === null ? "" : `, demonstrated action at p ${sft.action_probability.toFixed(3)}`) + `, ${sft.seconds.toFixed(0)} s`);
    startModel = sft.model_dir;
  } else {
    startModel = baseModel(run, opts.seed);
    opts.log(`no warm start (--sft-steps 0): the tiny model as initialised (seed ${opts.seed}), ${startModel}`);
  }
  const ui = opts.ui ? await startUi(run, startModel, opts.log) : undefined;
  try {
    const evalCfg: HeldOutEval = { ...opts.eval, tasks: opts.evalTasks, harness: opts.harness, split: heldOut ? "test" : undefined };
    const before = await phase(seconds, "eval before", () => evaluateHeldOut(startModel, evalCfg, join(run, "eval-before.json"), pids));
    opts.log(`${heldOut ? "held-out " : ""}before: ${describeEval(before, heldOut)}`);
    const trained = await phase(seconds, "GSPO", () => rl(opts, startModel, run, pids));
    const after = await phase(seconds, "eval after", () => evaluateHeldOut(trained.finalModel, evalCfg, join(run, "eval-after.json"), pids));
    opts.log(`${heldOut ? "held-out " : ""}after: ${describeEval(after, heldOut)} (model ${trained.finalModel})`);
    const pearsons = trained.steps.map((s) => s["mismatch/pearson_prob"]).filter((p): p is number => p !== undefined);
    const updates = trained.steps.filter((s) => s["batch/groups_trained"]).length;
    const left = (await Promise.all(pids.map((pid) => containersOfProcess(pid)))).flat();
    if (left.length) opts.log(`sandbox containers left behind by the run's processes (${pids.join(", ")}): ${left.join(" ")}`);
    const minutes = (Date.now() - started) / 60_000;
    const settings = { ...opts, log: undefined, sft: sft && { steps: sft.steps, loss_first: sft.loss_first, loss_last: sft.loss_last, action_probability: sft.action_probability } };
    writeFileSync(join(run, "run.json"), `${JSON.stringify({
      started_utc: new Date(started).toISOString(), minutes, phase_seconds: seconds, settings, harness: opts.harness, held_out: heldOut,
      warm_start: sft !== undefined, reward_before: before.pass1, reward_after: after.pass1,
      min_pearson: pearsons.length ? Math.min(...pearsons) : null, updates, containers_left: left.length, processes: pids,
      what: `The ${opts.harness} harness in Docker sandboxes, through the proxy, the tiny MoE policy (Qwen3 vocabulary) in the Python engine, ` +
        "GSPO with routing replay on local Ray pushing every version back to the engine. " +
        (opts.harness === "reference" && opts.evalTasks === EVAL_TASKS
          ? "Tasks: the `easy` family's `comparison` template (docs/demo.md says what that shows and what it does not). "
          : `Training tasks ${opts.tasks}, evaluation tasks ${opts.evalTasks}. `) +
        (heldOut ? "Held-out pass@1 is the real grader's reward on the evaluation source's test split, " : "pass@1 is the real grader's reward on every evaluation task (the source has no test split, so nothing is held out), ") +
        "before and after GSPO, same tasks and sampling settings." +
        (updates === 0 ? " No GSPO step updated the weights: every group's rewards were identical, so there was no learning signal and the policy after is the policy before." : ""),
    }, null, 1)}\n`);
    const report = spawnSyncReport(run);
    if (ui) opts.log(`Live UI stopped with the run; to look again: ts/bin/lego ui --run-dir ${run} --model-dir ${startModel}`);
    return {
      bench: "demo", harness: opts.harness, reward_before: before.pass1, reward_after: after.pass1, reward_gain: after.pass1 - before.pass1,
      pass_at_k_before: before.passK, pass_at_k_after: after.passK, k: before.k,
      min_pearson: pearsons.length ? Math.min(...pearsons) : null, updates, containers_left: left.length, minutes, report,
    };
  } finally {
    await ui?.close();
  }
}

function spawnSyncReport(run: string): string {
  const r = spawnSync(PYTHON, ["-m", "lego_rl.demo.report", "--run", run], { cwd: REPO_ROOT, encoding: "utf8" });
  if (r.status !== 0) throw new DemoError(`the report failed: ${r.stderr.trim().split("\n").at(-1)}`);
  return (JSON.parse(r.stdout.trim().split("\n").at(-1)!) as { report: string }).report;
}
