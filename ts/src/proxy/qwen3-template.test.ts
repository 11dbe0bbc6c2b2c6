/**
 * The TypeScript rendering of Qwen3's template equals the jinja interpreter's on
 * the shipped template source: targeted cases for each branch, then thousands
 * of random conversations built to hit the template's edges.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { ChatMessage, Role, ToolSpec } from "./chat.ts";
import { ChatTemplate } from "./chat-template.ts";
import { QWEN3_DIR } from "./test-support.ts";

const config = JSON.parse(readFileSync(join(QWEN3_DIR, "tokenizer_config.json"), "utf8")) as { chat_template: string; eos_token: string | null; bos_token: string | null };
const native = new ChatTemplate(config.chat_template, config);
const interpreted = new ChatTemplate(config.chat_template, config, { native: false });
type Options = { addGenerationPrompt: boolean; enableThinking?: boolean };
const OPTIONS: Options[] = [{ addGenerationPrompt: true }, { addGenerationPrompt: false }, { addGenerationPrompt: true, enableThinking: false }, { addGenerationPrompt: true, enableThinking: true }];

function same(messages: ChatMessage[], tools: ToolSpec[]): void {
  for (const o of OPTIONS) expect(native.render(messages, tools, o), JSON.stringify({ messages, tools, o })).toBe(interpreted.render(messages, tools, o));
}

function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

// Fragments that steer the template: think tags, tool_response wrapping, whitespace of every kind it trims.
const PIECES = ["<think>", "</think>", "<tool_response>", "</tool_response>", "\n", "\n\n", " ", "\t", "\u00a0", "\u2028", "plan", "x", "é", "日本", '"q"', "\\", "{}", ""];
const ARGUMENTS = ['{"cmd": "ls"}', '{"b":1,"a":[1,2.5,{"c":null}],"d":true}', '"just text"', "5", "null", "[1, 2]", "not json {", "", '{"u":"é\\n"}', "true"];
const ROLES: Role[] = ["system", "user", "assistant", "tool"];

function randomText(r: () => number): string {
  let s = "";
  for (let i = Math.floor(r() * 6); i > 0; i--) s += PIECES[Math.floor(r() * PIECES.length)]!;
  return s;
}

function randomMessage(r: () => number): ChatMessage {
  const role = ROLES[Math.floor(r() * ROLES.length)]!;
  let content = randomText(r);
  if (role === "user" && r() < 0.3) content = `<tool_response>${content}</tool_response>`;
  const m: ChatMessage = { role, content };
  if (role === "assistant") {
    if (r() < 0.3) m.reasoning = r() < 0.3 ? "" : randomText(r);
    else if (r() < 0.2) m.reasoning = null;
    if (r() < 0.5) m.tool_calls = Array.from({ length: Math.floor(r() * 3) }, (_, j) => ({ id: `c${j}`, name: r() < 0.5 ? "run" : "edit", arguments: ARGUMENTS[Math.floor(r() * ARGUMENTS.length)]! }));
  }
  if (role === "tool") m.tool_call_id = "c0";
  return m;
}

const TOOLS: ToolSpec[] = [
  { name: "run", description: "Run a shell command", parameters: { type: "object", properties: { cmd: { type: "string", description: "é \"quoted\"\n" } }, required: ["cmd"] } },
  { name: "edit", parameters: { type: "object", properties: { n: { type: "integer", minimum: 0, maximum: 1.5 }, flags: { type: "array", items: { enum: [true, false, null] } } } } },
];

describe("Qwen3's template rendered in TypeScript", () => {
  it("is chosen for the template Qwen3 ships, and only by its hash", () => {
    expect(native.native).toBe(true);
    expect(interpreted.native).toBe(false);
    expect(new ChatTemplate(config.chat_template + " ", config).native).toBe(false);
  });

  it("renders every branch as the interpreter does", () => {
    same([{ role: "system", content: "sys" }, { role: "user", content: "q" }], TOOLS);
    same([{ role: "system", content: "sys" }, { role: "user", content: "q" }], []);
    same([{ role: "user", content: "q" }], TOOLS);
    // History thinking: dropped before the last query, kept after it, from content or from reasoning.
    same(
      [
        { role: "user", content: "q1" },
        { role: "assistant", content: "<think>\nold plan\n</think>\n\nanswer" },
        { role: "user", content: "q2" },
        { role: "assistant", content: "\n\nnew", reasoning: "\nthought\n", tool_calls: [{ id: "a", name: "run", arguments: '{"cmd":"ls"}' }] },
        { role: "tool", content: "out1", tool_call_id: "a" },
        { role: "tool", content: "out2", tool_call_id: "a" },
        { role: "assistant", content: "", tool_calls: [{ id: "b", name: "run", arguments: "not json" }, { id: "c", name: "edit", arguments: '"text"' }] },
        { role: "user", content: "<tool_response>wrapped</tool_response>" },
        { role: "system", content: "late system" },
        { role: "assistant", content: "last" },
      ],
      TOOLS,
    );
  });

  it("renders 5000 random conversations exactly as the interpreter", () => {
    const r = rng(20261207);
    for (let k = 0; k < 5000; k++) {
      const messages = Array.from({ length: 1 + Math.floor(r() * 7) }, () => randomMessage(r));
      same(messages, r() < 0.5 ? TOOLS : r() < 0.5 ? [TOOLS[1]!] : []);
    }
  });

  it("leaves an empty conversation to the interpreter", () => {
    const tryRender = (t: ChatTemplate) => {
      try {
        return t.render([], [], { addGenerationPrompt: true });
      } catch (e) {
        return (e as Error).message;
      }
    };
    expect(tryRender(native)).toBe(tryRender(interpreted));
  });
});
