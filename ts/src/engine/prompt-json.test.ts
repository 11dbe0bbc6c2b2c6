/** The HTTP clients' prompt encoder: byte-identical to `[ids.join(",")]` whatever the previous prompt of the key was. */
import { describe, expect, it } from "vitest";
import { PromptJson } from "./prompt-json.ts";

const text = (b: Uint8Array) => Buffer.from(b).toString("utf8");
const expected = (ids: ArrayLike<number>) => `{"a":1,"prompt":[${Array.from(ids).join(",")}]}`;
const encode = (p: PromptJson, ids: ArrayLike<number>, key: string | null) => text(p.body(`{"a":1,"prompt":`, ids, "}", key));

function rng(seed: number) {
  let s = seed >>> 0 || 1;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

describe("PromptJson", () => {
  it("writes the same bytes as join for grown, edited, shortened and emptied prompts of one conversation", () => {
    const p = new PromptJson();
    const r = rng(3);
    let ids = Array.from({ length: 500 }, () => Math.floor(r() * 200_000));
    const seen: string[] = [];
    for (let turn = 0; turn < 40; turn++) {
      const change = turn % 5;
      if (change === 0) ids = [...ids, ...Array.from({ length: 1 + Math.floor(r() * 300) }, () => Math.floor(r() * 200_000))];
      else if (change === 1) ids = ids.map((t, i) => (i === Math.floor(ids.length / 2) ? t + 1 : t)); // an edit in the middle
      else if (change === 2) ids = ids.slice(0, Math.floor(ids.length * 0.7)); // the history was cut
      else if (change === 3) ids = [9, 99, 999, 9999, 99999, 0, 10, 100, ...ids.slice(3)]; // digit counts change at the front
      else ids = turn === 19 ? [] : [...ids, 0];
      const got = encode(p, Int32Array.from(ids), "s/thread-0");
      expect(got).toBe(expected(ids));
      seen.push(got);
      expect(JSON.parse(got).prompt).toEqual(ids);
    }
    expect(new Set(seen).size).toBeGreaterThan(30);
  });

  it("keeps conversations apart, and the caller's reused buffer does not leak into the next body", () => {
    const p = new PromptJson();
    const buf = new Int32Array(8);
    buf.set([1, 2, 3, 4]);
    expect(encode(p, buf.subarray(0, 4), "a")).toBe(expected([1, 2, 3, 4]));
    expect(encode(p, [1, 2, 7], "b")).toBe(expected([1, 2, 7]));
    // The proxy writes the thread's next prompt into the same buffer: the encoder compared against its own copy.
    buf.set([1, 2, 5, 4, 6]);
    expect(encode(p, buf.subarray(0, 5), "a")).toBe(expected([1, 2, 5, 4, 6]));
    expect(encode(p, [1, 2, 7, 8], "b")).toBe(expected([1, 2, 7, 8]));
    expect(encode(p, [-5, 2147483647, -2147483648], null)).toBe(expected([-5, 2147483647, -2147483648]));
  });

  it("holds at most maxTokens ids, dropping the least recently used conversation, and still encodes exactly", () => {
    const p = new PromptJson(1000);
    const ids = (n: number, base: number) => Array.from({ length: n }, (_, i) => base + i);
    encode(p, ids(400, 10), "a");
    encode(p, ids(400, 20), "b");
    expect(p.heldTokens).toBe(800);
    encode(p, ids(300, 30), "c"); // 1100 > 1000: "a" goes
    expect(p.heldTokens).toBe(700);
    expect(encode(p, ids(450, 10), "a")).toBe(expected(ids(450, 10)));
    expect(p.heldTokens).toBeLessThanOrEqual(1000);
    expect(encode(p, ids(5000, 1), "big")).toBe(expected(ids(5000, 1))); // larger than the budget: encoded, not kept
    expect(p.heldTokens).toBeLessThanOrEqual(1000);
    expect(new PromptJson(0).body("", [1, 2], "", "k")).toEqual(new Uint8Array(Buffer.from("[1,2]")));
  });

  it("refuses an id that is not an int32 and a bad budget, saying which", () => {
    const p = new PromptJson();
    expect(() => p.body("", [1, 2.5], "", "k")).toThrow(/prompt id 1 is 2.5, not an int32 token id/);
    expect(() => p.body("", [1, 2 ** 31], "", "k")).toThrow(/prompt id 1 is 2147483648/);
    expect(() => new PromptJson(-1)).toThrow(/maxTokens must be a whole number >= 0/);
    // The refused prompt left nothing half-written behind for its key.
    expect(text(p.body("", [1, 3], "", "k"))).toBe("[1,3]");
  });
});
