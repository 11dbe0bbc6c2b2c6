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

  it("reuses every message before the one a client rewrote, as Claude Code's moving cache breakpoint does", () => {
    const parser = new GrowingBodyParser("messages");
    type Block = Record<string, unknown>;
    const history: Array<{ role: string; content: Block[] }> = [{ role: "user", content: [{ type: "text", text: "task" }] }];
    // The breakpoint sits on the newest message only: the previous newest comes back without it.
    const body = () => JSON.stringify({
      model: "m", system: [{ type: "text", text: "s" }],
      messages: history.map((m, i) => (i === history.length - 1 ? { ...m, content: m.content.map((b) => ({ ...b, cache_control: { type: "ephemeral" } })) } : m)),
      tools: [{ name: "run" }],
    });
    const first = parseLikeJson(parser, body()) as { messages: unknown[] };
    history.push({ role: "assistant", content: [{ type: "tool_use", id: "t1", name: "run", input: { cmd: "ls" } }] });
    history.push({ role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "a, b], c" }] });
    const second = parseLikeJson(parser, body()) as { messages: unknown[] };
    // Only the first message came before the rewritten one: nothing before its own comma is reused yet.
    expect(second.messages[0]).not.toBe(first.messages[0]);
    history.push({ role: "assistant", content: [{ type: "text", text: "done" }] });
    const third = parseLikeJson(parser, body()) as { messages: unknown[] };
    expect(parser.lastReusedBytes).toBeGreaterThan(0);
    expect(third.messages[0]).toBe(second.messages[0]);
    expect(third.messages[1]).toBe(second.messages[1]);
    expect(third.messages[2]).not.toBe(second.messages[2]); // it lost its breakpoint
  });

  it("reuses the elements before an edit in the middle of the history and parses the rest", () => {
    const parser = new GrowingBodyParser("messages");
    const first = parseLikeJson(parser, '{"model":"m","messages":[{"a":1}, {"b":[2,","]}, {"c":3}],"n":1}') as { messages: unknown[] };
    const second = parseLikeJson(parser, '{"model":"m","messages":[{"a":1}, {"b":[2,"!"]}, {"c":3}, {"d":4}],"n":1}') as { messages: unknown[] };
    expect(second.messages[0]).toBe(first.messages[0]);
    expect(second.messages[1]).not.toBe(first.messages[1]);
    // The commas of the re-parsed part are known too: the next edit reuses up to it.
    const third = parseLikeJson(parser, '{"model":"m","messages":[{"a":1}, {"b":[2,"!"]}, {"c":3}, {"d":5}],"n":1}') as { messages: unknown[] };
    expect(third.messages[2]).toBe(second.messages[2]);
    // The head changed: nothing is reused.
    parseLikeJson(parser, '{"model":"x","messages":[{"a":1}, {"b":[2,"!"]}, {"c":3}, {"d":5}],"n":1}');
    expect(parser.lastReusedBytes).toBe(0);
    // A trailing comma right after the reused elements is still JSON.parse's error.
    parseLikeJson(parser, '{"model":"m","messages":[{"a":1}, {"b":2}],"n":1}');
    expect(() => parser.parse(bytes('{"model":"m","messages":[{"a":1}, ],"n":1}'))).toThrow(SyntaxError);
  });

  it("refuses a `}` where the history's `]` belongs, after a whole or a partly repeated history", () => {
    for (const [before, after] of [
      ['{"messages":[1,2]}', '{"messages":[1,3},"x":0}'],
      ['{"messages":[1]}', '{"messages":[1,2}}'],
      ['{"messages":[1,2,3]}', '{"messages":[1,}}'],
    ] as const) {
      const parser = new GrowingBodyParser("messages");
      parseLikeJson(parser, before);
      expect(() => parser.parse(bytes(after))).toThrow(SyntaxError);
    }
  });

  it("equals JSON.parse for random histories grown, edited, cut and re-spaced call after call", () => {
    let seed = 12345;
    const rand = (n: number) => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) % n);
    const values = [1, "x", 'q"uo,te]', { k: [1, { n: null }] }, [], "ü😀", true, { "}": "]" }];
    for (let run = 0; run < 20; run++) {
      const parser = new GrowingBodyParser("messages");
      let history: unknown[] = [];
      for (let call = 0; call < 25; call++) {
        const op = rand(6);
        if (op === 0 && history.length > 0) history[rand(history.length)] = values[rand(values.length)]; // edit
        else if (op === 1 && history.length > 1) history = history.slice(0, rand(history.length)); // cut
        else for (let k = rand(3) + 1; k > 0; k--) history.push(values[rand(values.length)]); // grow
        const space = rand(4) === 0 ? 2 : undefined;
        parseLikeJson(parser, JSON.stringify({ model: "m", messages: history, tail: rand(2) }, null, space));
      }
    }
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

  it("keeps the fields before the history as the same objects whenever a history element is reused", () => {
    const parser = new GrowingBodyParser("messages");
    const history: unknown[] = [{ role: "user", content: "a" }];
    // Claude Code's order: system blocks and tools before the messages.
    const body = () => JSON.stringify({ model: "m", system: [{ type: "text", text: "s".repeat(100) }], tools: [{ name: "run" }], messages: history, metadata: { user_id: "u" } });
    const first = parseLikeJson(parser, body()) as { system: unknown[]; tools: unknown[] };
    history.push({ role: "assistant", content: "b" });
    const second = parseLikeJson(parser, body()) as { system: unknown[]; tools: unknown[] };
    expect(parser.lastReusedBytes).toBeGreaterThan(0);
    expect(second.system).toBe(first.system);
    expect(second.tools).toBe(first.tools);
    // A rewritten newest message (the moving cache breakpoint): the head is still the same objects.
    history[1] = { role: "assistant", content: "b", cache_control: { type: "ephemeral" } };
    history.push({ role: "user", content: "c" });
    const third = parseLikeJson(parser, body()) as { system: unknown[]; tools: unknown[] };
    expect(parser.lastReusedBytes).toBeGreaterThan(0);
    expect(third.tools).toBe(first.tools);
    // Another head is parsed whole, and its own fields are kept from then on.
    const other = parseLikeJson(parser, body().replace('"model":"m"', '"model":"n"')) as { system: unknown[] };
    expect(parser.lastReusedBytes).toBe(0);
    expect(other.system).not.toBe(first.system);
    history.push({ role: "assistant", content: "d" });
    expect((parseLikeJson(parser, body().replace('"model":"m"', '"model":"n"')) as { system: unknown[] }).system).toBe(other.system);
  });

  it("sets the fields before the history as JSON.parse does when the tail repeats a key, or the head has __proto__", () => {
    const parser = new GrowingBodyParser("messages");
    for (const [head, tail] of [['"model":"m","1":0,', '"model":"again"'], ['"__proto__":{"polluted":true},"x":1,"x":2,', '"y":[1]']]) {
      parseLikeJson(parser, `{${head}"messages":[{"a":1}],${tail}}`);
      parseLikeJson(parser, `{${head}"messages":[{"a":1},{"b":2}],${tail}}`);
      expect(parser.lastReusedBytes).toBeGreaterThan(0);
      parseLikeJson(parser, `{${head}"messages":[{"a":1},{"b":2},{"c":3}],"z":0}`);
      expect(({} as Record<string, unknown>)["polluted"]).toBeUndefined();
    }
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
