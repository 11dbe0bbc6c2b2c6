import { describe, expect, it } from "vitest";
import type { ToolSpec } from "./chat.ts";
import { CompletionParser, parseCompletion, type CompletionEvent } from "./tool-calls.ts";

const tools: ToolSpec[] = [
  { name: "run", parameters: { type: "object", properties: { cmd: { type: "string" }, timeout: { type: "integer" }, env: { type: "object" } } } },
];

/** Feeds `text` one character at a time and merges adjacent text/reasoning events. */
function streamed(text: string, format: "qwen3_json" | "qwen3_coder_xml"): CompletionEvent[] {
  const p = new CompletionParser(format, tools);
  const events = [...[...text].flatMap((ch) => p.push(ch)), ...p.finish()];
  const merged: CompletionEvent[] = [];
  for (const e of events) {
    const last = merged[merged.length - 1];
    if (last && e.kind !== "tool_call" && last.kind === e.kind) last.text += e.text;
    else merged.push({ ...e });
  }
  return merged;
}

describe("Qwen3 JSON tool calls", () => {
  const text = '<think>\nI should list files.\n</think>\n\nLet me look.\n<tool_call>\n{"name": "run", "arguments": {"cmd": "ls -la", "timeout": 5}}\n</tool_call>\n<tool_call>\n{"name": "run", "arguments": {"cmd": "pwd"}}\n</tool_call>';

  it("splits reasoning, text and parallel tool calls", () => {
    expect(parseCompletion(text, "qwen3_json", tools)).toEqual({
      reasoning: "I should list files.",
      content: "Let me look.",
      calls: [
        { name: "run", arguments: '{"cmd":"ls -la","timeout":5}' },
        { name: "run", arguments: '{"cmd":"pwd"}' },
      ],
    });
  });

  it("gives the same events when the text arrives one character at a time", () => {
    expect(streamed(text, "qwen3_json")).toEqual([
      { kind: "reasoning", text: "I should list files." },
      { kind: "text", text: "Let me look." },
      { kind: "tool_call", call: { name: "run", arguments: '{"cmd":"ls -la","timeout":5}' } },
      { kind: "tool_call", call: { name: "run", arguments: '{"cmd":"pwd"}' } },
    ]);
  });

  it("leaves a malformed call in the text so the harness sees what the model wrote", () => {
    const bad = 'ok <tool_call>\n{"name": "run", "arguments": {"cmd": }\n</tool_call>';
    expect(parseCompletion(bad, "qwen3_json", tools)).toEqual({ reasoning: null, content: bad, calls: [] });
  });

  it("leaves an unterminated call in the text, with the newline before it", () => {
    const cut = 'x\n<tool_call>\n{"name": "run", "argu';
    expect(parseCompletion(cut, "qwen3_json", tools).content).toBe(cut);
    expect(streamed(cut, "qwen3_json")).toEqual([{ kind: "text", text: cut }]);
  });

  it("counts each block that does not parse or never closes (format collapse), not the ones that parse", () => {
    const p = new CompletionParser("qwen3_json", tools);
    const good = '<tool_call>\n{"name": "run", "arguments": {"cmd": "ls"}}\n</tool_call>';
    p.push(`${good}\n<tool_call>\nnot json\n</tool_call> then <tool_call>\n{"name": "run"`);
    p.finish();
    expect(p.malformedCalls).toBe(2);
  });

  it("does not end a call at a </tool_call> inside a string argument", () => {
    const args = { cmd: 'printf "</tool_call>\\n" > tags.txt', env: { NOTE: "a } and a { and </tool_call> and \\\" too" } };
    const t = `Writing it.\n<tool_call>\n${JSON.stringify({ name: "run", arguments: args })}\n</tool_call>`;
    const expected = { name: "run", arguments: JSON.stringify(args) };
    expect(parseCompletion(t, "qwen3_json", tools)).toEqual({ reasoning: null, content: "Writing it.", calls: [expected] });
    expect(streamed(t, "qwen3_json")).toEqual([
      { kind: "text", text: "Writing it." },
      { kind: "tool_call", call: expected },
    ]);
  });

  it("gives the harness a block that does not parse verbatim, whitespace around it included", () => {
    const t = "Look:\n<tool_call>\nnot json\n</tool_call>\n\nDone.";
    expect(parseCompletion(t, "qwen3_json", tools)).toEqual({ reasoning: null, content: t, calls: [] });
    expect(streamed(t, "qwen3_json")).toEqual([{ kind: "text", text: t }]);
    // After a call that parsed, the whitespace the template writes between calls is given back too.
    const call = '<tool_call>\n{"name": "run", "arguments": {"cmd": "ls"}}\n</tool_call>';
    const bad = '<tool_call>\n{"name": "run", "arguments": {"cmd": }\n</tool_call>';
    expect(parseCompletion(`${call}\n${bad} tail`, "qwen3_json", tools)).toEqual({ reasoning: null, content: `\n${bad} tail`, calls: [{ name: "run", arguments: '{"cmd":"ls"}' }] });
    expect(streamed(`${call}\n${bad} tail`, "qwen3_json")).toEqual([
      { kind: "tool_call", call: { name: "run", arguments: '{"cmd":"ls"}' } },
      { kind: "text", text: `\n${bad} tail` },
    ]);
  });

  it("treats tool-call tags as text when tool parsing is off (tool_choice none)", () => {
    expect(parseCompletion(text, "qwen3_json", tools, false).calls).toEqual([]);
  });

  it("holds back a partial tag but not ordinary text", () => {
    const p = new CompletionParser("qwen3_json", tools);
    expect(p.push("a < b <tool")).toEqual([{ kind: "text", text: "a < b " }]);
    expect(p.push("s>")).toEqual([{ kind: "text", text: "<tools>" }]);
  });
});

describe("Qwen3-Coder XML tool calls", () => {
  const text =
    "Running it.\n<tool_call>\n<function=run>\n<parameter=cmd>\nls -la\n</parameter>\n<parameter=timeout>\n5\n</parameter>\n<parameter=env>\n{\"A\": \"1\"}\n</parameter>\n</function>\n</tool_call>";

  it("types parameters by the tool's schema: strings raw, other types as JSON", () => {
    expect(parseCompletion(text, "qwen3_coder_xml", tools)).toEqual({
      reasoning: null,
      content: "Running it.",
      calls: [{ name: "run", arguments: '{"cmd":"ls -la","timeout":5,"env":{"A":"1"}}' }],
    });
  });

  it("streams to the same events", () => {
    expect(streamed(text, "qwen3_coder_xml")).toEqual([
      { kind: "text", text: "Running it." },
      { kind: "tool_call", call: { name: "run", arguments: '{"cmd":"ls -la","timeout":5,"env":{"A":"1"}}' } },
    ]);
  });

  it("keeps multi-line string values verbatim", () => {
    const t = "<tool_call>\n<function=run>\n<parameter=cmd>\nline1\n\nline3\n</parameter>\n</function>\n</tool_call>";
    expect(parseCompletion(t, "qwen3_coder_xml", tools).calls).toEqual([{ name: "run", arguments: JSON.stringify({ cmd: "line1\n\nline3" }) }]);
  });

  it("does not end a call at a </tool_call> inside a parameter value", () => {
    const t = "<tool_call>\n<function=run>\n<parameter=cmd>\necho '</tool_call>'\n</parameter>\n</function>\n</tool_call>";
    const expected = [{ name: "run", arguments: JSON.stringify({ cmd: "echo '</tool_call>'" }) }];
    expect(parseCompletion(t, "qwen3_coder_xml", tools).calls).toEqual(expected);
    expect(streamed(t, "qwen3_coder_xml")).toEqual([{ kind: "tool_call", call: expected[0] }]);
  });

  it("rejects junk between parameters", () => {
    const t = "<tool_call>\n<function=run>\njunk<parameter=cmd>\nls\n</parameter>\n</function>\n</tool_call>";
    expect(parseCompletion(t, "qwen3_coder_xml", tools).calls).toEqual([]);
  });
});
