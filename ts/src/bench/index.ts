export { BenchFlagError, benchFlags, positiveInt, type BenchFlagSpec } from "./flags.ts";
