/**
 * `pnpm bench:record NAME [ARGS...]`: runs `pnpm bench:NAME ARGS`, shows its
 * output, and appends its last line to docs/benchmarks.jsonl with the UTC
 * minute, the load before and after and the exact command; then regenerates
 * the headline table in docs/benchmarks.md. A run whose last line is not one
 * JSON object with "bench" records nothing and exits 1.
 */
import { spawn } from "node:child_process";
import { appendFileSync } from "node:fs";
import { loadavg } from "node:os";
import { REPO_ROOT } from "../repo-root.ts";
import { BenchRecordError, RECORDS_PATH, regenerate, type BenchRecord } from "./table.ts";

const [name, ...args] = process.argv.slice(2).filter((a, i) => !(i === 0 && a === "--"));
if (!name) {
  console.error("usage: pnpm bench:record NAME [ARGS...]   (runs pnpm bench:NAME ARGS and records its last line)");
  process.exit(2);
}
const command = ["pnpm", `bench:${name}`, ...args].join(" ");
const load0 = loadavg()[0]!.toFixed(2);
const at = new Date().toISOString().slice(0, 16) + "Z";
let out = "";
const child = spawn("pnpm", [`bench:${name}`, ...args], { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "inherit"] });
child.stdout.on("data", (chunk: Buffer) => {
  process.stdout.write(chunk);
  out += chunk.toString();
});
const code: number = await new Promise((resolve) => child.on("close", (c) => resolve(c ?? 1)));
const last = out.trimEnd().split("\n").at(-1) ?? "";
try {
  if (code !== 0) throw new BenchRecordError(`${command} exited ${code}; nothing recorded`);
  let result: BenchRecord["result"];
  try {
    result = JSON.parse(last) as BenchRecord["result"];
  } catch {
    throw new BenchRecordError(`${command}: its last line is not JSON, nothing recorded: ${last.slice(0, 200)}`);
  }
  if (typeof result?.bench !== "string") throw new BenchRecordError(`${command}: its last line has no "bench", nothing recorded`);
  const record: BenchRecord = { at, load: `${load0}–${loadavg()[0]!.toFixed(2)}`, command, result };
  appendFileSync(RECORDS_PATH, `${JSON.stringify(record)}\n`);
  regenerate();
  console.error(`recorded in ${RECORDS_PATH}; headline table regenerated`);
} catch (e) {
  console.error(`bench:record: ${(e as Error).message}`);
  process.exit(1);
}
