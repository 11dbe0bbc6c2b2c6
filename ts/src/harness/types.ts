/**
 * One interface for every harness adapter: given a task, the proxy session
 * the agent must talk to and the limits, say what to run inside the agent
 * container (as the unprivileged user) and which runtimes to mount.
 */
import type { AgentProgram, RuntimeMount, TaskDefinition } from "../sandbox/index.ts";
import type { FileTools } from "./file-touches.ts";
import type { HarnessRecordReader } from "./report.ts";

export interface HarnessLimits {
  /** Model calls the harness may make (its own turn limit). */
  maxTurns: number;
  /** Wall-clock limit of the agent stage, seconds. */
  timeoutSec: number;
}

/** What the harness is told about its proxy session, as seen from inside the container. */
export interface HarnessSession {
  /** Session base URL inside the container (Anthropic clients use it as is; OpenAI clients append /v1). */
  baseUrl: string;
  secret: string;
  /** The model name the proxy serves. */
  model: string;
  /** The engine's context window, tokens, when known. */
  contextWindow: number | null;
}

export interface Harness {
  readonly name: string;
  /** Pinned version, shown in reports and docs/harnesses.md. */
  readonly version: string;
  /** Runtimes to bind-mount read-only at /opt/lego-runtimes/NAME (none for the reference agent). */
  runtimes(): RuntimeMount[];
  program(def: TaskDefinition, session: HarnessSession, limits: HarnessLimits): AgentProgram;
  /** Its own record of the run (event stream or trajectory file): where the program writes it and how to read it (report.ts). */
  readonly record: HarnessRecordReader;
  /** How the tools it offers the model read and change files: what counts re-reads after edits (file-touches.ts). */
  readonly fileTools: FileTools;
}

/** Where every harness's own files (config, driver, secret, instruction) are written in the agent container, root-owned. */
export const HARNESS_FILES_DIR = "opt/lego-harness";
