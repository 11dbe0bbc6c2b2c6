/**
 * `lego check` on a model directory: the tokenizer the proxy encodes with against the
 * vocabulary the engine and trainer load (config.json), and the chat template against the
 * proxy's tool-call parser. The proxy owns tokenizer, template and parser (ts/src/proxy), so
 * these checks load the model exactly as `lego proxy` does (`loadProxyModel`); config.json is
 * read for its two fields here rather than through the Python model package, which would need
 * a Python start (torch import) for two numbers.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { loadProxyModel, parseCompletion, type ChatMessage, type ProxyModel, type ToolCallFormat, type ToolSpec } from "../proxy/index.ts";
import type { CheckResult } from "./preflight.ts";

const TOOL_CALL_FORMATS: ToolCallFormat[] = ["qwen3_json", "qwen3_coder_xml"];

/** Loads the model as the proxy would; a failure is a check result naming the files at fault. */
export function loadModelForCheck(modelDir: string, format: ToolCallFormat): ProxyModel | CheckResult {
  try {
    return loadProxyModel(modelDir, { toolCallFormat: format });
  } catch (e) {
    return { name: "tokenizer", ok: false, detail: (e as Error).message,
      fix: "point --model-dir at a model directory with tokenizer.json and tokenizer_config.json (with a chat_template and eos_token)" };
  }
}

/**
 * Wrong tokenizer: ids the proxy produces must be rows of the model's embedding, and the
 * end-of-turn token the proxy stops on must be one the model was trained to stop on.
 */
export function checkTokenizer(model: ProxyModel): CheckResult {
  const fix = "use the tokenizer.json and tokenizer_config.json of the checkpoint in --model-dir (they come from another model)";
  const path = join(model.modelDir, "config.json");
  let hf: Record<string, unknown>;
  try {
    hf = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
  } catch (e) {
    return { name: "tokenizer", ok: false, detail: `cannot read ${path}: ${(e as Error).message}`,
      fix: "point --model-dir at the model directory (config.json beside the tokenizer files)" };
  }
  const vocab = hf["vocab_size"];
  if (typeof vocab !== "number" || !Number.isInteger(vocab) || vocab <= 0)
    return { name: "tokenizer", ok: false, detail: `${path} has no positive integer vocab_size`, fix: "restore the checkpoint's config.json" };
  const size = model.tokenizer.size;
  if (size > vocab)
    return { name: "tokenizer", ok: false, detail: `tokenizer has ${size} tokens but the model's vocabulary has ${vocab} rows: ids ${vocab}..${size - 1} have no embedding`, fix };
  const eosIds = eosTokenIds(hf["eos_token_id"]);
  const eos = model.codec.endOfTurnId;
  if (eosIds.length > 0 && !eosIds.includes(eos))
    return { name: "tokenizer", ok: false,
      detail: `tokenizer's eos_token ${JSON.stringify(model.codec.endOfTurnText)} is id ${eos}, but config.json stops on ${JSON.stringify(eosIds)}`, fix };
  return { name: "tokenizer", ok: true, detail: `${size} tokens within ${vocab} vocabulary rows; eos ${JSON.stringify(model.codec.endOfTurnText)} = ${eos}` };
}

function eosTokenIds(v: unknown): number[] {
  if (typeof v === "number") return [v];
  return Array.isArray(v) ? v.filter((x): x is number => typeof x === "number") : [];
}

/** A call with arguments that trip naive serialisers: a space, a quote, a newline, a number, a nested object. */
const PROBE_TOOL: ToolSpec = {
  name: "lego_check_probe",
  description: "preflight probe",
  parameters: { type: "object", properties: { path: { type: "string" }, count: { type: "integer" }, opts: { type: "object" } }, required: ["path"] },
};
const PROBE_ARGS = { path: 'a "b"\nc.txt', count: 2, opts: { deep: true } };

/**
 * Template/parser mismatch: render an assistant turn holding one tool call with the model's
 * template, take the part the model would have sampled (after the generation prompt, before
 * the end-of-turn tail), and parse it with the configured tool-call format. The call must come
 * back with the same name and arguments, or the proxy would hand the harness text instead of calls.
 */
export function checkTemplateRoundTrip(model: ProxyModel, format: ToolCallFormat): CheckResult {
  const name = "template";
  const completion = sampledPart(model);
  if (typeof completion !== "string") return completion;
  const back = roundTrips(completion, format);
  if (back === true) return { name, ok: true, detail: `a rendered tool call parses back as ${format}` };
  const other = TOOL_CALL_FORMATS.find((f) => f !== format && roundTrips(completion, f) === true);
  return { name, ok: false, detail: `the chat template writes a tool call the ${format} parser does not read back (${back}); it rendered ${JSON.stringify(completion.slice(0, 200))}`,
    fix: other ? `the template writes ${other} tool calls: pass --tool-call-format ${other}`
      : "use a chat template that renders tool calls in a form the proxy parses (qwen3_json or qwen3_coder_xml)" };
}

function sampledPart(model: ProxyModel): string | CheckResult {
  const user: ChatMessage = { role: "user", content: "probe" };
  const assistant: ChatMessage = { role: "assistant", content: "", tool_calls: [{ id: "call_probe", name: PROBE_TOOL.name, arguments: JSON.stringify(PROBE_ARGS) }] };
  const fix = "use a chat template that renders assistant tool calls after the generation prompt (the model's own tokenizer_config.json)";
  let prompt: string, full: string;
  try {
    prompt = model.template.render([user], [PROBE_TOOL], { addGenerationPrompt: true });
    full = model.template.render([user, assistant], [PROBE_TOOL], { addGenerationPrompt: false });
  } catch (e) {
    return { name: "template", ok: false, detail: (e as Error).message, fix };
  }
  if (!full.startsWith(prompt))
    return { name: "template", ok: false, detail: "the generation prompt is not a prefix of the rendered assistant turn, so sampled tokens would not match the history", fix };
  const tail = model.template.assistantTail;
  const body = full.slice(prompt.length);
  return tail.length > 0 && body.endsWith(tail) ? body.slice(0, -tail.length) : body;
}

/** True, or what went wrong. */
function roundTrips(completion: string, format: ToolCallFormat): true | string {
  const { calls } = parseCompletion(completion, format, [PROBE_TOOL]);
  if (calls.length !== 1) return `${calls.length} tool calls parsed, expected 1`;
  const call = calls[0]!;
  if (call.name !== PROBE_TOOL.name) return `name ${JSON.stringify(call.name)}`;
  let args: unknown;
  try {
    args = JSON.parse(call.arguments);
  } catch {
    return `arguments are not JSON: ${call.arguments.slice(0, 80)}`;
  }
  return isDeepStrictEqual(args, PROBE_ARGS) ? true : `arguments came back as ${call.arguments.slice(0, 120)}`;
}

/** Both model checks; the template check only runs on a model that loaded. */
export function modelChecks(modelDir: string, format: ToolCallFormat): CheckResult[] {
  const model = loadModelForCheck(modelDir, format);
  if (!("tokenizer" in model)) return [model];
  return [checkTokenizer(model), checkTemplateRoundTrip(model, format)];
}
