import { describe, expect, it } from "vitest";
import { qwen3 } from "./test-support.ts";

describe("byte-level decode", () => {
  it("equals the library's decode on random ids, added tokens and characters split across tokens", () => {
    const { tokenizer } = qwen3();
    expect((tokenizer as unknown as { byteDecoder: unknown }).byteDecoder, "Qwen3 takes the fast path").not.toBeNull();
    let seed = 11;
    const rnd = () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32);
    const text = "def f(x):\n    return x  # ünïcödé 😀 日本語 <tool_call>\n{\"a\": 1}\n</tool_call><|im_end|>\n";
    const ids = tokenizer.encode(text);
    const added = [tokenizer.requireTokenId("<|im_end|>"), tokenizer.requireTokenId("<tool_call>"), tokenizer.requireTokenId("<think>")];
    const samples: number[][] = [ids];
    // Every prefix: multi-byte characters cut in the middle decode to U+FFFD, as in the library.
    for (let n = 1; n <= ids.length; n++) samples.push(ids.slice(0, n), ids.slice(n - 1));
    for (let k = 0; k < 500; k++)
      samples.push(Array.from({ length: 1 + Math.floor(rnd() * 20) }, () => (rnd() < 0.1 ? added[Math.floor(rnd() * added.length)]! : Math.floor(rnd() * 151_000))));
    for (const s of samples) expect(tokenizer.decode(s), JSON.stringify(s)).toBe(tokenizer.decodeWithLibrary(s));
    expect(tokenizer.decode(ids)).toBe(text);
    expect(tokenizer.decode([])).toBe("");
    // Not in the vocabulary (engines pad it): nothing, as in the library, without asking it.
    expect(tokenizer.decode([10 ** 9])).toBe(tokenizer.decodeWithLibrary([10 ** 9]));
    expect(tokenizer.decode([ids[0]!, 151_700, ids[0]!])).toBe(tokenizer.decodeWithLibrary([ids[0]!, 151_700, ids[0]!]));
  });
});
