/**
 * `lego tasks list|show|validate|export|mine SRC` and `lego eval --tasks SRC`.
 * SRC is a Harbor task directory (or a folder of them), a SWE-bench-style
 * .jsonl, a task list .json, or a suite name (builtin, easy[:seed=N,count=M]).
 * Machine-readable output is JSON on stdout (one object per line, or the
 * report as the last line); progress goes to stderr.
 */
import { writeFileSync } from "node:fs";
import type { Argv } from "yargs";
import type { LegoCommand } from "../lego-command.ts";
import { RolloutRunner } from "../rollout/index.ts";
import { emptyAgent, harnessLauncher, oracleAgent, type AgentLauncher } from "./agents.ts";
import { defaultTasksConfig, type TasksConfig } from "./config.ts";
import { evaluate, formatTable, mixedTaskList } from "./eval.ts";
import { exportHarbor, exportSweBench } from "./export.ts";
import { checkHealth, HealthStore, healthyOnly } from "./health.ts";
import { mineCommand } from "./mine-cli.ts";
import { openTaskSource } from "./sources.ts";
import type { Split, Task } from "./task.ts";
import { join } from "node:path";

const print = (o: unknown) => process.stdout.write(`${JSON.stringify(o)}\n`);
const progress = (line: string) => process.stderr.write(`${line}\n`);

interface SourceArgs {
  source: string;
  split?: Split;
  limit?: number;
  "cache-dir": string;
  "repo-root": string[];
}

const sourceOptions = (y: Argv) =>
  y
    .option("split", { choices: ["train", "test"] as const, describe: "only tasks of this split" })
    .option("limit", { type: "number", describe: "only the first N tasks" })
    .option("cache-dir", { type: "string", default: defaultTasksConfig().cacheDir, describe: "generated environments, suites, health results" })
    .option("repo-root", { type: "string", array: true, default: [] as string[], describe: "folders holding SWE-bench records' repositories or archives" });

function tasksConfig(a: SourceArgs): TasksConfig {
  return { ...defaultTasksConfig(), cacheDir: a["cache-dir"], repoRoots: a["repo-root"] };
}

export const healthStore = (cfg: TasksConfig) => new HealthStore(join(cfg.cacheDir, "health.json"));

async function openSource(a: SourceArgs): Promise<{ cfg: TasksConfig; tasks: Task[] }> {
  const cfg = tasksConfig(a);
  const set = await openTaskSource(a.source, cfg, { split: a.split });
  return { cfg, tasks: a.limit ? set.tasks.slice(0, a.limit) : set.tasks };
}

export const tasksCommand: LegoCommand = {
  command: "tasks <command>",
  describe: "list, inspect, health-check, export and mine tasks",
  builder: (y: Argv) =>
    y
      .command(
        "list <source>",
        "one JSON line per task: id, split, named tests",
        (b) => sourceOptions(b.positional("source", { type: "string", demandOption: true })),
        async (a) => {
          const { tasks } = await openSource(a as unknown as SourceArgs);
          for (const t of tasks) print({ id: t.id, split: t.split ?? null, fail_to_pass: t.failToPass.length, pass_to_pass: t.passToPass.length, kind: t.record ? "swebench" : "harbor" });
        },
      )
      .command(
        "show <source> <id>",
        "one task in full: its record (or Harbor directory), instruction and what the sandbox runs",
        (b) => sourceOptions(b.positional("source", { type: "string", demandOption: true }).positional("id", { type: "string", demandOption: true })),
        async (a) => {
          const { tasks } = await openSource(a as unknown as SourceArgs);
          const t = tasks.find((x) => x.id === a.id);
          if (!t) throw new Error(`no task ${a.id as string} in ${a.source as string} (\`lego tasks list\` shows the ids)`);
          const def = await t.definition();
          print({
            id: t.id,
            source: t.source,
            split: t.split ?? null,
            record: t.record ?? null,
            harbor_dir: t.harborDir ?? null,
            instruction: def.instruction,
            config: def.config,
            environment: def.environment,
            overlay: (def.overlay?.files ?? []).map((f) => f.path),
            grading_files: (def.overlay?.gradingFiles ?? []).map((f) => f.path),
            tests_dir: def.testsDir,
          });
        },
      )
      .command(
        "validate <source>",
        "health check in the real sandbox: gold must score 1, empty 0; failures are quarantined (cached by task hash)",
        (b) =>
          sourceOptions(b.positional("source", { type: "string", demandOption: true }))
            .option("force", { type: "boolean", default: false, describe: "check again even if a result is cached" })
            .option("concurrency", { type: "number", default: 2, describe: "rollouts at once" })
            .option("warm-pool", { type: "number", default: 1, describe: "warm containers per image and stage" }),
        async (a) => {
          const { cfg, tasks } = await openSource(a as unknown as SourceArgs);
          const runner = await RolloutRunner.create({ concurrency: a.concurrency as number, warmPoolSize: a["warm-pool"] as number });
          const t0 = performance.now();
          let results;
          try {
            results = await checkHealth(tasks, runner, healthStore(cfg), { force: a.force as boolean, log: progress, onResult: (r) => print({ event: "health", ...r }) });
          } finally {
            await runner.close();
          }
          const unhealthy = results.filter((r) => !r.healthy);
          print({ event: "summary", tasks: results.length, healthy: results.length - unhealthy.length, quarantined: unhealthy.length, cached: results.filter((r) => r.cached).length, wall_s: Math.round((performance.now() - t0) / 100) / 10 });
          if (unhealthy.length) process.exitCode = 1;
        },
      )
      .command(
        "export <source>",
        "write tasks as SWE-bench JSONL (+ repos/) or as Harbor directories",
        (b) =>
          sourceOptions(b.positional("source", { type: "string", demandOption: true }))
            .option("format", { choices: ["swebench", "harbor"] as const, demandOption: true })
            .option("out", { type: "string", demandOption: true, describe: "output folder" })
            .option("encode-lists", { type: "boolean", default: false, describe: "swebench: FAIL_TO_PASS/PASS_TO_PASS as JSON-encoded strings, as the SWE-bench dataset" })
            .option("base", { type: "string", default: "lego-rl/base", describe: "harbor: the image exported Dockerfiles build FROM" }),
        async (a) => {
          const { tasks } = await openSource(a as unknown as SourceArgs);
          const out = a.out as string;
          if (a.format === "swebench") print({ event: "export", format: "swebench", out, ...(await exportSweBench(tasks, out, { encodeLists: a["encode-lists"] as boolean })) });
          else print({ event: "export", format: "harbor", out, tasks: (await exportHarbor(tasks, out, { base: a.base as string })).length });
        },
      )
      .command(mineCommand)
      .demandCommand(1, "Name a tasks subcommand: list, show, validate, export, mine."),
  handler: () => {},
};

export const evalCommand: LegoCommand = {
  command: "eval",
  describe: "run tasks through the real stages with an agent (--oracle, --empty or a harness) and report pass@k",
  builder: (y: Argv) =>
    sourceOptions(y)
      .option("tasks", { type: "string", demandOption: true, describe: "task source (directory, .jsonl, task list, suite name)" })
      .option("oracle", { type: "boolean", default: false, describe: "apply each task's gold solution (every healthy task scores 1)" })
      .option("empty", { type: "boolean", default: false, describe: "do nothing (every healthy task scores 0)" })
      .option("harness", { type: "string", describe: "harness adapter (ts/src/harness/)" })
      .option("engine", { type: "string", describe: "engine behind the harness's proxy session: scripted-gold, scripted-edit, answer-at-once, or a real engine's tcp://HOST:PORT or unix:///PATH (python -m lego_rl.engine)" })
      .option("model-dir", { type: "string", describe: "with an engine address: the model directory the engine serves (tokenizer, chat template)" })
      .option("temperature", { type: "number", default: 1, describe: "with an engine address: sampling temperature of every turn" })
      .option("max-tokens-per-turn", { type: "number", default: 2048, describe: "with an engine address: completion tokens per turn at most" })
      .option("max-turns", { type: "number", default: 30, describe: "the harness's model calls per rollout at most" })
      .option("k", { type: "number", default: 1, describe: "samples per task; pass@k is reported" })
      .option("concurrency", { type: "number", default: 2 })
      .option("warm-pool", { type: "number", default: 1, describe: "warm containers per image and stage" })
      .option("healthy-only", { type: "boolean", default: false, describe: "leave out tasks not passing their last health check" })
      .option("report", { type: "string", describe: "also write the JSON report here" })
      .option("keep-mixed", { type: "string", describe: "write the tasks solved sometimes but not always as a task list here" })
      .check((a) => {
        const modes = [a.oracle, a.empty, a.harness !== undefined].filter(Boolean).length;
        if (modes !== 1) throw new Error("choose one of --oracle, --empty or --harness H --engine E");
        if (a.harness !== undefined && a.engine === undefined) throw new Error("--harness needs --engine");
        if (/^(tcp|ipc):\/\//.test(String(a.engine ?? "")) && a["model-dir"] === undefined) throw new Error(`--engine ${a.engine as string} needs --model-dir (the model directory the engine serves)`);
        if (!Number.isInteger(a.k) || a.k < 1) throw new Error("--k must be a positive integer");
        return true;
      }),
  handler: async (a) => {
    const { cfg, tasks: all } = await openSource({ ...(a as unknown as SourceArgs), source: a.tasks as string });
    let tasks = all;
    if (a["healthy-only"]) {
      const h = await healthyOnly(all, healthStore(cfg));
      progress(`healthy-only: ${h.healthy.length} kept, ${h.quarantined.length} quarantined, ${h.unchecked.length} unchecked (run \`lego tasks validate\`)`);
      tasks = h.healthy;
    }
    const launcher: AgentLauncher = a.oracle ? oracleAgent : a.empty ? emptyAgent : await harnessLauncher({
      harness: a.harness as string, engine: a.engine as string, modelDir: (a["model-dir"] as string | undefined) ?? null,
      sampling: { temperature: a.temperature as number, maxTokensPerTurn: a["max-tokens-per-turn"] as number }, limits: { maxTurns: a["max-turns"] as number },
    });
    const runner = await RolloutRunner.create({ ...launcher.runner, concurrency: a.concurrency as number, warmPoolSize: a["warm-pool"] as number });
    let report;
    try {
      report = await evaluate(tasks, a.tasks as string, runner, launcher, { k: a.k as number, log: progress, onRow: (r) => progress(`${r.task} #${r.sample}: ${r.status} reward=${r.reward} ${(r.ms / 1000).toFixed(1)}s`) });
    } finally {
      await runner.close();
      await launcher.close?.();
    }
    process.stdout.write(`${formatTable(report)}\n`);
    if (a.report) writeFileSync(a.report as string, `${JSON.stringify(report, null, 1)}\n`);
    if (a["keep-mixed"]) writeFileSync(a["keep-mixed"] as string, `${JSON.stringify(mixedTaskList(report), null, 1)}\n`);
    print(report);
    // --oracle and --empty check the suite: every task must score 1 (resp. 0) through the real stages.
    const want = a.oracle ? 1 : a.empty ? 0 : undefined;
    if (want !== undefined && report.rows.some((r) => r.status !== "ok" || r.reward !== want)) process.exitCode = 1;
  },
};
