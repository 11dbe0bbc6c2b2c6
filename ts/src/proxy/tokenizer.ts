/**
 * The model's tokenizer (tokenizer.json + tokenizer_config.json from a model
 * directory), loaded with @huggingface/tokenizers.
 *
 * Encoding is the proxy's main CPU cost, so the proxy only ever encodes text
 * that is new in a request, and this class adds two caches:
 * - an LRU of recent whole texts (harnesses resend system prompts, count_tokens);
 * - for byte-level BPE tokenizers of the GPT-2/Qwen family, a cache per
 *   pre-tokenizer piece: text is split at added tokens, NFC-normalised and cut
 *   by the tokenizer's own Split regex, exactly as the library does, and each
 *   piece's ids come from the library once. BPE never merges across pieces, so
 *   the result is identical (tokenizer.test.ts checks it against the library)
 *   and about 10x faster on code and tool output, which repeat pieces a lot.
 *   Any other tokenizer.json shape uses the library's encode unchanged.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

export class ModelFilesError extends Error {
  constructor(readonly modelDir: string, message: string, options?: { cause?: unknown }) {
    super(`model directory ${modelDir}: ${message}`, options);
    this.name = "ModelFilesError";
  }
}

/** What the proxy reads from tokenizer_config.json besides the vocabulary. */
export interface TokenizerConfig {
  chat_template: string;
  eos_token: string | null;
  bos_token: string | null;
}

export class TextTokenizer {
  private readonly cache = new Map<string, number[]>();
  private readonly vocabSize: number;
  private readonly pieces: PieceEncoder | null;
  private readonly addedTokens: string[];

  constructor(
    private readonly tokenizer: Tokenizer,
    readonly config: TokenizerConfig,
    private readonly cacheEntries = 256,
    tokenizerJson: Record<string, unknown> | null = null,
  ) {
    this.vocabSize = tokenizer.get_vocab(true).size;
    this.pieces = tokenizerJson ? PieceEncoder.create(tokenizer, tokenizerJson) : null;
    this.addedTokens = [...tokenizer.get_added_tokens_decoder().values()].map((t) => t.content);
  }

  /**
   * True when `text` starts with an added (special) token: text split there
   * tokenizes the same in pieces as whole, because added tokens are matched
   * before the pre-tokenizer runs.
   */
  startsWithAddedToken(text: string): boolean {
    return this.addedTokens.some((t) => text.startsWith(t));
  }

  static fromModelDir(modelDir: string): TextTokenizer {
    const read = (name: string): Record<string, unknown> => {
      try {
        return JSON.parse(readFileSync(join(modelDir, name), "utf8")) as Record<string, unknown>;
      } catch (cause) {
        throw new ModelFilesError(modelDir, `cannot read ${name}`, { cause });
      }
    };
    const tokenizerJson = read("tokenizer.json");
    const configJson = read("tokenizer_config.json");
    const chat_template = configJson["chat_template"];
    if (typeof chat_template !== "string")
      throw new ModelFilesError(modelDir, "tokenizer_config.json has no string chat_template");
    return new TextTokenizer(
      new Tokenizer(tokenizerJson, configJson),
      { chat_template, eos_token: tokenString(configJson["eos_token"]), bos_token: tokenString(configJson["bos_token"]) },
      256,
      tokenizerJson,
    );
  }

  /** Token ids of `text`; special-token strings in it become their ids; no BOS/EOS is added. */
  encode(text: string): number[] {
    if (text.length === 0) return [];
    const hit = this.cache.get(text);
    if (hit) {
      // Refresh recency (Map keeps insertion order).
      this.cache.delete(text);
      this.cache.set(text, hit);
      return hit;
    }
    const ids = this.pieces ? this.pieces.encode(text) : this.encodeWithLibrary(text);
    if (this.cacheEntries > 0) {
      this.cache.set(text, ids);
      if (this.cache.size > this.cacheEntries) this.cache.delete(this.cache.keys().next().value!);
    }
    return ids;
  }

  /** The library's own encode, without the proxy's caches (the reference the fast path must equal). */
  encodeWithLibrary(text: string): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: false }).ids;
  }

  /** Text of `ids`, special tokens included (tool-call and think tags are special in Qwen3). */
  decode(ids: ArrayLike<number>): string {
    return this.tokenizer.decode(Array.from(ids), { skip_special_tokens: false });
  }

  tokenId(token: string): number | undefined {
    return this.tokenizer.token_to_id(token);
  }

  /** The id of a token that must exist (e.g. the end-of-turn token). */
  requireTokenId(token: string): number {
    const id = this.tokenizer.token_to_id(token);
    if (id === undefined) throw new Error(`token ${JSON.stringify(token)} is not in the vocabulary`);
    return id;
  }

  get size(): number {
    return this.vocabSize;
  }
}

function tokenString(v: unknown): string | null {
  if (typeof v === "string") return v;
  if (v && typeof v === "object" && typeof (v as { content?: unknown }).content === "string")
    return (v as { content: string }).content;
  return null;
}

/**
 * Internals of @huggingface/tokenizers 0.2.0 the piece encoder uses; checked
 * at construction, so a library change falls back to the plain encode.
 */
interface TokenizerInternals {
  added_tokens_map?: Map<string, { id: number }>;
  pre_tokenizer?: { tokenizers?: Array<{ pre_tokenize_text(text: string): string[] }> };
  remove_space?: boolean;
  do_lowercase_and_remove_accent?: boolean;
}

class PieceEncoder {
  private readonly cache = new Map<string, number[]>();
  /** Added tokens, longest first: a regex alternation then takes the longest match at the leftmost position, as the library's trie does. */
  private readonly addedRe: RegExp;

  private constructor(
    private readonly tokenizer: Tokenizer,
    private readonly added: Map<string, { id: number }>,
    private readonly split: { pre_tokenize_text(text: string): string[] },
    private readonly maxEntries = 200_000,
  ) {
    const contents = [...added.keys()].sort((a, b) => b.length - a.length);
    this.addedRe = new RegExp(contents.map((c) => c.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|"), "g");
  }

  /** A piece encoder when tokenizer.json is the byte-level BPE shape it reproduces exactly; otherwise null. */
  static create(tokenizer: Tokenizer, json: Record<string, unknown>): PieceEncoder | null {
    const normalizer = json["normalizer"] as { type?: string } | null;
    const pre = json["pre_tokenizer"] as { type?: string; pretokenizers?: Array<Record<string, unknown>> } | null;
    const model = json["model"] as { type?: string; byte_fallback?: boolean } | null;
    const added = (json["added_tokens"] ?? []) as Array<{ lstrip?: boolean; rstrip?: boolean; normalized?: boolean; single_word?: boolean }>;
    const [split, byteLevel] = pre?.pretokenizers ?? [];
    const shapeOk =
      (normalizer === null || normalizer?.type === "NFC") &&
      pre?.type === "Sequence" &&
      pre.pretokenizers?.length === 2 &&
      split?.["type"] === "Split" &&
      split["behavior"] === "Isolated" &&
      split["invert"] === false &&
      byteLevel?.["type"] === "ByteLevel" &&
      byteLevel["use_regex"] === false &&
      byteLevel["add_prefix_space"] === false &&
      model?.type === "BPE" &&
      !model.byte_fallback &&
      added.length > 0 &&
      added.every((t) => !t.lstrip && !t.rstrip && !t.normalized && !t.single_word);
    const internals = tokenizer as unknown as TokenizerInternals;
    const splitter = internals.pre_tokenizer?.tokenizers?.[0];
    if (!shapeOk || !internals.added_tokens_map || !splitter || internals.remove_space || internals.do_lowercase_and_remove_accent) return null;
    return new PieceEncoder(tokenizer, internals.added_tokens_map, splitter);
  }

  encode(text: string): number[] {
    const out: number[] = [];
    let start = 0;
    this.addedRe.lastIndex = 0;
    for (let m = this.addedRe.exec(text); m !== null; m = this.addedRe.exec(text)) {
      if (m.index > start) this.encodeSection(text.slice(start, m.index), out);
      out.push(this.added.get(m[0])!.id);
      start = m.index + m[0].length;
    }
    if (start < text.length) this.encodeSection(text.slice(start), out);
    return out;
  }

  private encodeSection(section: string, out: number[]): void {
    for (const piece of this.split.pre_tokenize_text(section.normalize("NFC"))) {
      const ids = this.cache.get(piece) ?? this.learn(piece);
      for (const id of ids) out.push(id);
    }
  }

  private learn(piece: string): number[] {
    const ids = this.tokenizer.encode(piece, { add_special_tokens: false }).ids;
    if (this.cache.size >= this.maxEntries) this.cache.clear();
    this.cache.set(piece, ids);
    return ids;
  }
}
