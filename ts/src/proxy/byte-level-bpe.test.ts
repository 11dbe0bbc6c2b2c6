import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ByteLevelBpe } from "./byte-level-bpe.ts";
import { Growable } from "./growable.ts";
import { QWEN3_DIR, qwen3 } from "./test-support.ts";

const model = (JSON.parse(readFileSync(join(QWEN3_DIR, "tokenizer.json"), "utf8")) as { model: Record<string, unknown> }).model;

describe("ByteLevelBpe", () => {
  it("is built for Qwen3's model and refuses models whose results it would not reproduce", () => {
    expect(ByteLevelBpe.create(model)).not.toBeNull();
    expect(ByteLevelBpe.create({ ...model, unk_token: "<unk>" })).toBeNull();
    expect(ByteLevelBpe.create({ ...model, ignore_merges: true })).toBeNull();
    expect(ByteLevelBpe.create({ ...model, dropout: 0.1 })).toBeNull();
    expect(ByteLevelBpe.create({ ...model, type: "WordPiece" })).toBeNull();
    // A merge whose joined token is not in the vocabulary: the library would emit an unknown token.
    const vocab = model["vocab"] as Record<string, number>;
    expect([vocab["Ġhello"], vocab["Ġworld"], vocab["ĠhelloĠworld"]]).toEqual([expect.any(Number), expect.any(Number), undefined]);
    expect(ByteLevelBpe.create({ ...model, merges: [...(model["merges"] as unknown[]), ["Ġhello", "Ġworld"]] })).toBeNull();
  });

  it("encodes a piece as the library does, and lets go of the working arrays a huge piece needed", () => {
    const bpe = ByteLevelBpe.create(model)!;
    const { tokenizer } = qwen3();
    const out = new Growable(Int32Array, 16);
    for (const piece of ["hello", " world", "日本語", "😀👍🏽", "   ", "aaaaaaaaaaaaaaaaaaaaaaa"]) {
      out.truncate(0);
      bpe.encodeInto(piece, out);
      expect(Array.from(out.view()), piece).toEqual(tokenizer.encodeWithLibrary(piece));
    }
    out.truncate(0);
    bpe.encodeInto("a".repeat(200_000), out);
    expect(out.length).toBeGreaterThan(0);
    expect(bpe.workingBytes).toBeLessThanOrEqual(1 << 16);
  });
});
