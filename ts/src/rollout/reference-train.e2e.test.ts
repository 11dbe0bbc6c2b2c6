/**
 * The reference harness into a trainer, end to end with real processes: our
 * reference agent in real sandboxes → the proxy → scripted engines (gold in
 * one rollout of each group, an answer at once in the other) → the worker →
 * the real Python receiver → a GSPO step on each group. The checks are
 * train-suite.ts's, shared with Claude Code. (tests/test_the_loop_smoke.py
 * runs the same harness against the real engine and Ray trainer; there the
 * tokens are the policy's own, so this exact comparison is not possible.)
 */
import { trainSuite } from "./train-suite.ts";

trainSuite({ harness: "reference", maxTurns: 8, timeoutSec: 120 });
