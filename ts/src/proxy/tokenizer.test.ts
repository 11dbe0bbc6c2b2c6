import { describe, expect, it } from "vitest";
import { QWEN3_DIR, qwen3 } from "./test-support.ts";
import { TextTokenizer } from "./tokenizer.ts";

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

  it("encodes and decodes without the library's model, which it lets go once loaded, exactly as the library does on every byte", () => {
    const tokenizer = TextTokenizer.fromModelDir(QWEN3_DIR);
    expect(tokenizer.holdsLibrary, "Qwen3's tokenizer.json is plain byte-level BPE").toBe(false);
    let seed = 3;
    const rnd = () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32);
    // Code points of every UTF-8 length (1-4 bytes), so every byte value and long merge chains occur.
    const ranges: Array<[number, number]> = [[0x00, 0x7f], [0x80, 0x7ff], [0x800, 0xd7ff], [0xe000, 0xffff], [0x10000, 0x10ffff]];
    const texts = Array.from({ length: 400 }, () =>
      Array.from({ length: 1 + Math.floor(rnd() * 30) }, () => {
        const [lo, hi] = ranges[Math.floor(rnd() * ranges.length)]!;
        return String.fromCodePoint(lo + Math.floor(rnd() * (hi - lo + 1)));
      }).join(""),
    );
    texts.push("x".repeat(3000), " ".repeat(700) + "y", "\u{1F600}".repeat(50), ...corpus());
    const encoded = texts.map((t) => tokenizer.encode(t));
    const decoded = encoded.map((ids) => tokenizer.decode(ids));
    expect(tokenizer.tokenId("<|im_end|>")).toBe(151645);
    expect(tokenizer.holdsLibrary, "encoding, decoding and added-token lookups never load the library again").toBe(false);
    texts.forEach((t, i) => {
      expect(encoded[i], JSON.stringify(t)).toEqual(tokenizer.encodeWithLibrary(t));
      // The library refuses an empty list (decode gives "").
      expect(decoded[i]).toBe(encoded[i]!.length === 0 ? "" : tokenizer.decodeWithLibrary(encoded[i]!));
    });
    expect(tokenizer.holdsLibrary, "the references load it").toBe(true);
  });

  it("round-trips text through decode", () => {
    const { tokenizer } = qwen3();
    const text = "def f(x):\n    return x  # ünïcödé 😀\n";
    expect(tokenizer.decode(tokenizer.encode(text))).toBe(text);
  });
});
