import { describe, expect, it } from "vitest";
import { GrowingBodyParser } from "./growing-body.ts";

const bytes = (text: string) => Buffer.from(text, "utf8");

/** Parses `text` and checks the result is exactly JSON.parse's, key order and prototypes included. */
function parseLikeJson(parser: GrowingBodyParser, text: string): unknown {
  const value = parser.parse(bytes(text));
  const reference: unknown = JSON.parse(text);
  expect(value).toEqual(reference);
  if (value && typeof value === "object") {
    expect(Object.keys(value)).toEqual(Object.keys(reference as object));
    expect(Object.getPrototypeOf(value)).toBe(Object.getPrototypeOf(reference));
  }
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

  it("keeps the fields after the history as the same objects while their bytes repeat", () => {
    const parser = new GrowingBodyParser("messages");
    const history: unknown[] = [{ role: "user", content: "a" }];
    const body = (maxTokens: number) => JSON.stringify({ model: "m", messages: history, tools: [{ name: "run", schema: { type: "object" } }], max_tokens: maxTokens });
    const first = parseLikeJson(parser, body(8)) as { tools: unknown[] };
    history.push({ role: "assistant", content: "b" });
    const second = parseLikeJson(parser, body(8)) as { tools: unknown[] };
    expect(second.tools).toBe(first.tools);
    history.push({ role: "user", content: "c" });
    const changed = parseLikeJson(parser, body(9)) as { tools: unknown[] };
    expect(changed.tools).not.toBe(second.tools);
    history.push({ role: "assistant", content: "d" });
    expect((parseLikeJson(parser, body(9)) as { tools: unknown[] }).tools).toBe(changed.tools);
  });

  it("sets the fields after the history as JSON.parse does: repeated keys, __proto__, key order", () => {
    const parser = new GrowingBodyParser("messages");
    for (const tail of ['"model":"again","1":2,"__proto__":{"polluted":true},"x":[1]', '"__proto__":null,"model":"m2"']) {
      parseLikeJson(parser, `{"model":"m","messages":[{"a":1}],${tail}}`);
      const value = parseLikeJson(parser, `{"model":"m","messages":[{"a":1},{"b":2}],${tail}}`);
      expect(parser.lastReusedBytes).toBeGreaterThan(0);
      expect(({} as Record<string, unknown>)["polluted"]).toBeUndefined();
      expect(Object.getOwnPropertyNames(value)).toContain("__proto__");
    }
  });

  it("gives JSON.parse's answer when only the text after the history is broken", () => {
    const parser = new GrowingBodyParser("messages");
    parseLikeJson(parser, '{"messages":[{"a":1}],"model":"m"}');
    expect(() => parser.parse(bytes('{"messages":[{"a":1},{"b":2}],}'))).toThrow(SyntaxError); // trailing comma
    parseLikeJson(parser, '{"messages":[{"a":1}],"model":"m"}');
    expect(() => parser.parse(bytes('{"messages":[{"a":1},{"b":2}],"model":"m"} x'))).toThrow(SyntaxError); // text after the object
    parseLikeJson(parser, '{"messages":[{"a":1}],"model":"m"}');
    expect(() => parser.parse(bytes('{"messages":[{"a":1},{"b":2}],"model":}'))).toThrow(SyntaxError);
    parseLikeJson(parser, '{"messages":[{"a":1}],"model":"m"}  ');
    parseLikeJson(parser, '{"messages":[{"a":1},{"b":2}],"model":"m"}  ');
    expect(parser.lastReusedBytes).toBeGreaterThan(0);
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
