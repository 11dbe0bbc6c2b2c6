import { describe, expect, it } from "vitest";
import { anthropicConversation, MessagesJson, openaiConversation, type Conversation } from "./workload.ts";

/** Replies shaped as each API's engine answers, with a tool call whose id changes per turn. */
const replies = {
  openai: (turn: number) => ({ choices: [{ message: { role: "assistant", content: null, tool_calls: [{ id: `call_${turn}`, type: "function", function: { name: "run", arguments: "{\"cmd\":\"ls\"}" } }] } }] }),
  anthropic: (turn: number) => ({ content: [{ type: "text", text: "ok" }, { type: "tool_use", id: `toolu_${turn}`, name: "run", input: { cmd: "ls", timeout: 30 } }] }),
};

function bodies(conversation: Conversation, reply: (turn: number) => Record<string, unknown>, turns: number): string[] {
  const out: string[] = [];
  for (let turn = 0; turn < turns; turn++) {
    out.push(conversation.request());
    conversation.reply(reply(turn), (what) => new Error(what), `output of turn ${turn}`);
  }
  return out;
}

describe("the proxy bench's request bodies", () => {
  it("serialize each message once and still equal JSON.stringify of the whole request", () => {
    const json = new MessagesJson();
    json.push({ role: "system", content: "s \"quoted\"" });
    json.push({ role: "user", content: "u\n" });
    expect(json.body({ model: "m" }, { tools: [], max_tokens: 8 })).toBe(JSON.stringify({ model: "m", messages: [{ role: "system", content: "s \"quoted\"" }, { role: "user", content: "u\n" }], tools: [], max_tokens: 8 }));
    expect(json.body({ model: "m" }, { n: 1 }, { role: "user", content: "last" })).toBe(JSON.stringify({ model: "m", messages: [{ role: "system", content: "s \"quoted\"" }, { role: "user", content: "u\n" }, { role: "user", content: "last" }], n: 1 }));
  });

  it("grow by whole turns: each Chat Completions body is valid JSON whose history extends the previous one", () => {
    const sent = bodies(openaiConversation("task"), replies.openai, 4).map((b) => JSON.parse(b) as { messages: unknown[]; max_tokens: number });
    for (let turn = 1; turn < sent.length; turn++) {
      expect(sent[turn]!.messages.slice(0, sent[turn - 1]!.messages.length)).toEqual(sent[turn - 1]!.messages);
      expect(sent[turn]!.messages.length).toBe(sent[turn - 1]!.messages.length + 2);
    }
    expect(sent[3]!.max_tokens).toBe(256);
  });

  it("move the Messages cache breakpoint to the newest message only, as Claude Code does", () => {
    type Body = { messages: Array<{ content: Array<Record<string, unknown>> }>; metadata: unknown };
    const sent = bodies(anthropicConversation("task"), replies.anthropic, 4).map((b) => JSON.parse(b) as Body);
    for (const body of sent) {
      const marked = body.messages.flatMap((m, i) => m.content.filter((b) => b["cache_control"] !== undefined).map(() => i));
      expect(marked).toEqual([body.messages.length - 1]);
      expect(body.metadata).toEqual({ user_id: "bench" });
    }
    // The tool input comes back with its keys in another order.
    expect(Object.keys(sent[1]!.messages[1]!.content[1]!["input"] as object)).toEqual(["timeout", "cmd"]);
  });
});
