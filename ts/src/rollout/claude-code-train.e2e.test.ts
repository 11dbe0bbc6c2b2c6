/**
 * Claude Code into a trainer, end to end with real processes: the real
 * `claude` binary from the mounted runtime in real sandboxes → the proxy →
 * scripted engines (gold in one rollout of each group, an answer at once in
 * the other) → the worker → the real Python receiver → a GSPO step on each
 * group. The checks (token for token, provenance, every step trained) are
 * train-suite.ts's, shared with the reference harness.
 */
import { join } from "node:path";
import { RUNTIMES_DIR } from "../harness/index.ts";
import { trainSuite } from "./train-suite.ts";

trainSuite({
  harness: "claude-code", maxTurns: 8, timeoutSec: 300,
  requires: join(RUNTIMES_DIR, "harness/node_modules/@anthropic-ai/claude-code-linux-x64/claude"),
});
