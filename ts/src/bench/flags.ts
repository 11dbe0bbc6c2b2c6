/**
 * Flags of the benchmark commands (`pnpm bench:NAME --n 20`): benchmarks take
 * their knobs as flags, never from the environment, so a run's command line
 * is the whole record of how it was run.
 */
import { parseArgs } from "node:util";

export class BenchFlagError extends Error {}

export type BenchFlagSpec = Record<string, { default?: string; describe: string }>;

/** Parses `--name value` flags; an unknown flag or a missing value names the flags there are. */
export function benchFlags<S extends BenchFlagSpec>(spec: S, argv = process.argv.slice(2)): { [K in keyof S]: string | undefined } {
  const options = Object.fromEntries(Object.entries(spec).map(([k, v]) => [k, { type: "string" as const, default: v.default }]));
  // `pnpm bench:NAME -- --n 5` hands the separator on; it means nothing here.
  const args = argv[0] === "--" ? argv.slice(1) : argv;
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: false }).values as { [K in keyof S]: string | undefined };
  } catch (e) {
    const known = Object.entries(spec).map(([k, v]) => `--${k} (${v.describe}${v.default === undefined ? "" : `, default ${v.default}`})`).join(", ");
    throw new BenchFlagError(`${(e as Error).message}; flags: ${known}`);
  }
}

/** A positive integer flag, or an error naming the flag and the value given. */
export function positiveInt(name: string, raw: string | undefined): number {
  const n = Number(raw);
  if (raw === undefined || !Number.isInteger(n) || n < 1) throw new BenchFlagError(`--${name} must be a positive integer, got ${JSON.stringify(raw)}`);
  return n;
}
