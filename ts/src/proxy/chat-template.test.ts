import { describe, expect, it } from "vitest";
import type { ChatMessage, ToolSpec } from "./chat.ts";
import { ChatTemplate, TemplateError } from "./chat-template.ts";
import { qwen3 } from "./test-support.ts";

const tools: ToolSpec[] = [{ name: "run", description: "Run a shell command", parameters: { type: "object", properties: { cmd: { type: "string" } } } }];
const history: ChatMessage[] = [
  { role: "system", content: "You are a coding agent." },
  { role: "user", content: "List the files." },
  { role: "assistant", content: "", tool_calls: [{ id: "c1", name: "run", arguments: '{"cmd": "ls"}' }] },
];
const next: ChatMessage[] = [
  { role: "tool", tool_call_id: "c1", content: "a.txt\nb.txt" },
  { role: "user", content: "Now read a.txt" },
];

describe("Qwen3 chat template", () => {
  const { template, tokenizer } = qwen3();

  it("knows the text it writes after an assistant turn: <|im_end|> and a newline the engine never samples", () => {
    expect(template.assistantTail).toBe("<|im_end|>\n");
  });

  it("renders only the new messages as the exact suffix of a full render", () => {
    const full = template.render([...history, ...next], tools, { addGenerationPrompt: true });
    const cont = template.renderContinuation(next, tools, { addGenerationPrompt: true })!;
    expect(cont).toBe("<|im_start|>user\n<tool_response>\na.txt\nb.txt\n</tool_response><|im_end|>\n<|im_start|>user\nNow read a.txt<|im_end|>\n<|im_start|>assistant\n");
    expect(full.endsWith("<|im_end|>\n" + cont)).toBe(true);
  });

  it("tokenizes pieces split at special tokens exactly like the whole text", () => {
    const full = template.render([...history, ...next], tools, { addGenerationPrompt: true });
    const cont = template.renderContinuation(next, tools, { addGenerationPrompt: true })!;
    const head = full.slice(0, full.length - cont.length);
    expect([...tokenizer.encode(head), ...tokenizer.encode(cont)]).toEqual(tokenizer.encode(full));
  });

  it("renders the last assistant turn differently once more messages follow (why the proxy never re-renders history)", () => {
    const alone = template.render(history, tools, { addGenerationPrompt: false });
    const followed = template.render([...history, ...next], tools, { addGenerationPrompt: false });
    expect(alone).toContain("<think>\n\n</think>");
    expect(followed.startsWith(alone)).toBe(false);
  });

  it("does not reproduce earlier turns when re-rendered: it drops old <think> blocks", () => {
    const withThinking: ChatMessage[] = [
      { role: "user", content: "q1" },
      { role: "assistant", content: "<think>\nplan\n</think>\n\nanswer" },
      { role: "user", content: "q2" },
    ];
    expect(template.render(withThinking, [], { addGenerationPrompt: true })).not.toContain("plan");
  });
});

describe("a template that fails while rendering", () => {
  // Renders like a chat template, but refuses a message with the role "bad".
  const source =
    "{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('role bad is not allowed') }}{% endif %}" +
    "<|{{ m.role }}|>{{ m.content }}<|end|>{% endfor %}";
  const template = new ChatTemplate(source, { eos_token: null, bos_token: null });

  it("fails with a TemplateError that carries the template's message and a stack", () => {
    const render = () => template.render([{ role: "bad", content: "x" } as unknown as ChatMessage], [], { addGenerationPrompt: false });
    expect(render).toThrow(TemplateError);
    expect(render).toThrow(/render failed: .*role bad is not allowed/);
    try {
      render();
    } catch (e) {
      expect((e as Error).stack).toMatch(/chat-template/);
    }
  });

  it("leaves Error.stackTraceLimit as it found it, after a render and after a failure", () => {
    const before = Error.stackTraceLimit;
    template.render([{ role: "user", content: "hi" }], [], { addGenerationPrompt: false });
    expect(Error.stackTraceLimit).toBe(before);
    expect(() => template.render([{ role: "bad", content: "x" } as unknown as ChatMessage], [], { addGenerationPrompt: false })).toThrow(TemplateError);
    expect(Error.stackTraceLimit).toBe(before);
  });
});
