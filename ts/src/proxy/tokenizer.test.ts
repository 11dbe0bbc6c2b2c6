import { describe, expect, it } from "vitest";
import { qwen3 } from "./test-support.ts";

/** Texts that stress pre-tokenization: code, whitespace runs, CRLF, contractions, digits, CJK, emoji, combining marks, special tokens. */
function corpus(): string[] {
  const { template } = qwen3();
  let seed = 42;
  const rnd = () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32);
  const atoms = ["const", " x", "=", " 42", ";\n", "    ", "\t", "\r\n", "don't", " I'LL", "  \n\n ", "über", "e\u0301", "日本語", "😀👍🏽", "<|im_end|>", "<tool_call>", "{\"a\": [1, 2.5e-3]}", "__init__", "$$", " ", "\n", "ǅ", "١٢٣", "ｆｕｌｌ"];
  const random = Array.from({ length: 300 }, () => Array.from({ length: 1 + Math.floor(rnd() * 40) }, () => atoms[Math.floor(rnd() * atoms.length)]!).join(""));
  const rendered = template.render(
    [
      { role: "system", content: "You are an agent.\n\n  Rules:\n- be brief  \n" },
      { role: "user", content: "Fix `foo()`  in src/a.ts\r\nthanks!!" },
      { role: "assistant", content: "<think>\nplan\n</think>\n\nok", tool_calls: [{ id: "1", name: "run", arguments: '{"cmd": "ls -la  /tmp"}' }] },
      { role: "tool", tool_call_id: "1", content: "total 0\n-rw-r--r--  1 root root    0 a.txt\n" },
    ],
    [{ name: "run", description: "Run", parameters: { type: "object", properties: { cmd: { type: "string" } } } }],
    { addGenerationPrompt: true },
  );
  return [...random, rendered, "", " ", "\n\n\n", "a".repeat(5000)];
}

describe("tokenizer", () => {
  it("encodes exactly like @huggingface/tokenizers, three times (cold, cached pieces, cached long sections)", () => {
    const { tokenizer } = qwen3();
    for (const text of corpus()) {
      const reference = tokenizer.encodeWithLibrary(text);
      expect(tokenizer.encode(text), JSON.stringify(text)).toEqual(reference);
    }
    for (const text of corpus()) expect(tokenizer.encode(text)).toEqual(tokenizer.encodeWithLibrary(text));
    // Long sections kept whole (keepSections) give the same ids inside texts that embed them in new surroundings.
    for (const text of corpus()) expect(tokenizer.encode(`<|im_start|>${text}\n<|im_end|>x`, { keepSections: true })).toEqual(tokenizer.encodeWithLibrary(`<|im_start|>${text}\n<|im_end|>x`));
    for (const text of corpus()) expect(tokenizer.encode(`<|im_start|>${text}\n<|im_end|>y`)).toEqual(tokenizer.encodeWithLibrary(`<|im_start|>${text}\n<|im_end|>y`));
    for (const text of corpus()) expect(tokenizer.encode(`${text}<|im_end|>`)).toEqual(tokenizer.encodeWithLibrary(`${text}<|im_end|>`));
  });

  it("splits ASCII with the scanner exactly as the Split regex does (random strings of edge characters)", () => {
    const { tokenizer } = qwen3();
    const splitters = tokenizer.pieceSplitters!;
    expect(splitters.scanner("x")).not.toBeNull(); // Qwen3's pre-tokenizer is the one the scanner reproduces
    let seed = 7;
    const rnd = () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32);
    // Every ASCII code, with the characters the regex treats specially drawn far more often.
    const edge = ["'s", "'T", "'re", "'vE", "'LL", "'ll", "'d", "'M", "'r", "'l", "'", "s", "S", "t", "r", "R", "e", "E", "v", "m", "l", "L", "d", "D", "x", "0", "7", " ", " ", "\t", "\n", "\r", "\v", "\f", ";", "_", "(", "\u0000", "\u001f", "\u007f"];
    const all = Array.from({ length: 128 }, (_, c) => String.fromCharCode(c));
    for (let n = 0; n < 5000; n++) {
      const len = 1 + Math.floor(rnd() * 24);
      let text = "";
      for (let i = 0; i < len; i++) text += rnd() < 0.8 ? edge[Math.floor(rnd() * edge.length)]! : all[Math.floor(rnd() * 128)]!;
      expect(splitters.scanner(text), JSON.stringify(text)).toEqual(splitters.regex(text));
    }
    for (const text of corpus()) {
      const pieces = splitters.scanner(text);
      if (pieces) expect(pieces, JSON.stringify(text)).toEqual(splitters.regex(text));
    }
    expect(splitters.scanner("über")).toBeNull(); // non-ASCII goes through the regex
  });

  it("round-trips text through decode", () => {
    const { tokenizer } = qwen3();
    const text = "def f(x):\n    return x  # ünïcödé 😀\n";
    expect(tokenizer.decode(tokenizer.encode(text))).toBe(text);
  });
});
