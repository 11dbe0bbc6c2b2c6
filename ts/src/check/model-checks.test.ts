/**
 * `lego check --model-dir` on model directories written by the real writer
 * (python -m lego_rl.model.tiny, Qwen3 and byte tokenizers), and on the two mistakes it must
 * catch: tokenizer files from another model, and a tool-call format the template does not write.
 */
import { execFile, spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../repo-root.ts";

const LEGO = resolve(import.meta.dirname, "../../bin/lego");
const PYTHON = join(REPO_ROOT, ".venv/bin/python");
const lego = (...args: string[]) => spawnSync(LEGO, ["check", "--min-free-gib", "0.1", ...args], { encoding: "utf8", timeout: 50_000 });

let dir = "";
const qwen3 = () => join(dir, "qwen3");
const bytes = () => join(dir, "bytes");

/** A copy of `configFrom`'s config.json beside `tokenizerFrom`'s tokenizer files. */
function mixed(name: string, configFrom: string, tokenizerFrom: string): string {
  const out = join(dir, name);
  mkdirSync(out, { recursive: true });
  copyFileSync(join(configFrom, "config.json"), join(out, "config.json"));
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) copyFileSync(join(tokenizerFrom, f), join(out, f));
  return out;
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "check-model-"));
  const write = (out: string, tokenizer: string) =>
    promisify(execFile)(PYTHON, ["-m", "lego_rl.model.tiny", "--out", out, "--tokenizer", tokenizer, "--seed", "0"], { cwd: REPO_ROOT, timeout: 110_000 });
  await Promise.all([write(qwen3(), "qwen3"), write(bytes(), "bytes")]);
}, 120_000);

afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("lego check --model-dir", () => {
  it("passes on a Qwen3 model with its own tokenizer and the default tool-call format", { timeout: 60_000 }, () => {
    const r = lego("--model-dir", qwen3());
    expect(r.status, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toMatch(/ok {3}tokenizer: 151669 tokens within 151669 vocabulary rows/);
    expect(r.stdout).toMatch(/ok {3}template: a rendered tool call parses back as qwen3_json/);
  });

  it("fails naming the fix on a wrong tokenizer: more tokens than embedding rows", { timeout: 60_000 }, () => {
    const r = lego("--model-dir", mixed("bytes-model-qwen3-tokenizer", bytes(), qwen3()));
    expect(r.status).toBe(1);
    expect(r.stdout).toContain("FAIL tokenizer: tokenizer has 151669 tokens but the model's vocabulary has 259 rows");
    expect(r.stdout).toContain("fix: use the tokenizer.json and tokenizer_config.json of the checkpoint in --model-dir");
  });

  it("fails naming the fix on a wrong tokenizer that fits the vocabulary but stops on another token", { timeout: 60_000 }, () => {
    const r = lego("--model-dir", mixed("qwen3-model-bytes-tokenizer", qwen3(), bytes()));
    expect(r.status).toBe(1);
    expect(r.stdout).toContain('FAIL tokenizer: tokenizer\'s eos_token "<|im_end|>" is id 258, but config.json stops on [151645,151643]');
    expect(r.stdout).toContain("fix: use the tokenizer.json and tokenizer_config.json of the checkpoint");
  });

  it("fails naming the fix on a template/parser mismatch (Qwen3 JSON template, XML parser)", { timeout: 60_000 }, () => {
    const r = lego("--model-dir", qwen3(), "--tool-call-format", "qwen3_coder_xml");
    expect(r.status).toBe(1);
    expect(r.stdout).toContain("FAIL template: the chat template writes a tool call the qwen3_coder_xml parser does not read back");
    expect(r.stdout).toContain("fix: the template writes qwen3_json tool calls: pass --tool-call-format qwen3_json");
  });

  it("fails naming the fix on a template that drops tool calls (the byte-tokenizer toy template)", { timeout: 60_000 }, () => {
    const r = lego("--model-dir", bytes());
    expect(r.status).toBe(1);
    expect(r.stdout).toMatch(/ok {3}tokenizer: 259 tokens/);
    expect(r.stdout).toContain("FAIL template: the chat template writes a tool call the qwen3_json parser does not read back (0 tool calls parsed, expected 1)");
    expect(r.stdout).toContain("fix: use a chat template that renders tool calls");
  });

  it("fails with a clear message on a directory without model files", { timeout: 60_000 }, () => {
    const r = lego("--model-dir", join(dir, "missing"));
    expect(r.status).toBe(1);
    expect(r.stdout).toMatch(/FAIL tokenizer: model directory .*missing: cannot read tokenizer\.json/);
    expect(r.stdout).toContain("fix: point --model-dir at a model directory");
  });
});
