import { describe, expect, it } from "vitest";
import { GrowingBodyParser } from "./growing-body.ts";

const bytes = (text: string) => Buffer.from(text, "utf8");

/** Parses `text` and checks the result is exactly JSON.parse's. */
function parseLikeJson(parser: GrowingBodyParser, text: string): unknown {
  const value = parser.parse(bytes(text));
  expect(value).toEqual(JSON.parse(text));
  return value;
}

describe("GrowingBodyParser", () => {
  it("parses only what follows the previous body's history, keeping the earlier elements as the same objects", () => {
    const parser = new GrowingBodyParser("messages");
    const history: unknown[] = [{ role: "system", content: "be brief" }, { role: "user", content: 'say "hi" \\ ünïcödé 😀' }];
    const body = () => JSON.stringify({ model: "m", messages: history, tools: [{ type: "function" }], max_tokens: 8 });
    const first = parseLikeJson(parser, body()) as { messages: unknown[] };
    expect(parser.lastReusedBytes).toBe(0);
    history.push({ role: "assistant", content: "", tool_calls: [{ id: "c1", function: { arguments: '{"a":"]"}' } }] }, { role: "tool", content: "[]{}\"," });
    const second = parseLikeJson(parser, body()) as { messages: unknown[] };
    expect(parser.lastReusedBytes).toBeGreaterThan(0);
    expect(second.messages[0]).toBe(first.messages[0]);
    expect(second.messages[1]).toBe(first.messages[1]);
    history.push({ role: "user", content: "more" });
    const third = parseLikeJson(parser, body()) as { messages: unknown[] };
    expect(third.messages[3]).toBe(second.messages[3]);
    // A retry sends the same body again: nothing new, everything reused.
    const retry = parseLikeJson(parser, body()) as { messages: unknown[] };
    expect(retry.messages[4]).toBe(third.messages[4]);
  });

  it("works on pretty-printed bodies and with the history first or last", () => {
    for (const make of [
      (m: unknown[]) => JSON.stringify({ messages: m, model: "x" }, null, 2),
      (m: unknown[]) => JSON.stringify({ model: "x", stream: true, system: [{ text: "s" }], messages: m }, null, "\t"),
    ]) {
      const parser = new GrowingBodyParser("messages");
      const m: unknown[] = [{ role: "user", content: "a" }];
      parseLikeJson(parser, make(m));
      m.push({ role: "assistant", content: "b" }, 12, null, "s");
      parseLikeJson(parser, make(m));
      expect(parser.lastReusedBytes).toBeGreaterThan(0);
    }
  });

  it("parses the whole body when the history was edited, compacted or only looks extended", () => {
    const parser = new GrowingBodyParser("messages");
    parseLikeJson(parser, '{"messages":[{"role":"user","content":"abc"}],"model":"m"}');
    parseLikeJson(parser, '{"messages":[{"role":"user","content":"abd"}],"model":"m"}'); // edited
    expect(parser.lastReusedBytes).toBe(0);
    parseLikeJson(parser, '{"messages":[1],"model":"m"}');
    parseLikeJson(parser, '{"messages":[12],"model":"m"}'); // the last number grew: not the same element
    expect(parser.lastReusedBytes).toBe(0);
    parseLikeJson(parser, '{"messages":[12, 3],"model":"m"}');
    expect(parser.lastReusedBytes).toBeGreaterThan(0);
  });

  it("gives JSON.parse's answer for bodies that only the reused part would make look valid", () => {
    const parser = new GrowingBodyParser("messages");
    parseLikeJson(parser, '{"messages":[{"a":1}],"model":"m"}');
    expect(() => parser.parse(bytes('{"messages":[{"a":1}, ],"model":"m"}'))).toThrow(SyntaxError); // trailing comma
    parseLikeJson(parser, '{"messages":[{"a":1}],"model":"m"}');
    expect(() => parser.parse(bytes('{"messages":[{"a":1},{"b":],"model":"m"}'))).toThrow(SyntaxError);
    parseLikeJson(parser, '{"messages":[{"a":1}],"model":"m"}');
    expect(() => parser.parse(bytes('{"messages":[{"a":1},{"b":2}],"model":"m"'))).toThrow(SyntaxError); // truncated
  });

  it("leaves a body alone when its history key appears twice or is spelled with escapes", () => {
    const parser = new GrowingBodyParser("messages");
    parseLikeJson(parser, '{"messages":[{"a":1}],"model":"m"}');
    // JSON.parse keeps the last "messages": prepending the old elements would be wrong.
    const twice = parseLikeJson(parser, '{"messages":[{"a":1},{"b":2}],"messages":[{"c":3}]}') as { messages: unknown[] };
    expect(twice.messages).toEqual([{ c: 3 }]);
    parseLikeJson(parser, '{"messages":[{"a":1}],"model":"m"}');
    const escaped = parseLikeJson(parser, '{"messages":[{"a":1},{"b":2}],"mess\\u0061ges":[]}') as { messages: unknown[] };
    expect(escaped.messages).toEqual([]);
  });

  it("handles bodies without the history array, or with an empty one", () => {
    const parser = new GrowingBodyParser("input");
    parseLikeJson(parser, '{"input":"just text"}');
    parseLikeJson(parser, '{"input":[]}');
    parseLikeJson(parser, '{"input":[{"x":1}]}');
    parseLikeJson(parser, "[1,2]");
    parseLikeJson(parser, '"text"');
    expect(parser.lastReusedBytes).toBe(0);
  });
});
