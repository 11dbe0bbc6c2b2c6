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
 *   Two refinements: pure-ASCII sections are cut by a scanner equal to the
 *   Qwen2 Split regex (no regex engine, about 2x faster; tested against the
 *   regex), and long sections of whole renders (system prompt, tool list,
 *   which every session's first call repeats) are cached whole.
 *
 * For those tokenizers the pieces the cache has not seen are encoded by
 * byte-level-bpe.ts and decoding is byte-level-decoder.ts, so the library's
 * model (31 MB of strings and Maps for Qwen3, marked by every full garbage
 * collection) is let go once they are built. The library is loaded again only
 * when asked for by name: `encodeWithLibrary` and `decodeWithLibrary` (the
 * references tests compare with) and `tokenId` of a token that is not an added one.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { ByteLevelBpe } from "./byte-level-bpe.ts";
import { ByteLevelDecoder } from "./byte-level-decoder.ts";
import { Growable } from "./growable.ts";
import { PieceTable, hashUnits, type CodeUnits } from "./piece-table.ts";

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
  /** The model's context length as the tokenizer config states it (`model_max_length`); null when unset. */
  model_max_length: number | null;
}

export class TextTokenizer {
  private readonly cache = new Map<string, Int32Array>();
  /** `encode`'s working buffer (encoding is synchronous: one call at a time). */
  private readonly scratch = new Growable(Int32Array, 1 << 12);
  private readonly vocabSize: number;
  private readonly pieces: PieceEncoder | null;
  private readonly byteDecoder: ByteLevelDecoder | null;
  private readonly addedTokens: string[];
  /** Added token -> id: the lookups the proxy makes by name (end-of-turn and stop tokens). */
  private readonly addedIds: Map<string, number>;
  /** The library's tokenizer, null while encode and decode do without it (see the module doc). */
  private tokenizer: Tokenizer | null;

  constructor(
    tokenizer: Tokenizer,
    readonly config: TokenizerConfig,
    private readonly cacheEntries = 256,
    tokenizerJson: Record<string, unknown> | null = null,
    /** Builds the library's tokenizer again; given, the one passed in is dropped when the proxy's own paths cover encode and decode. */
    private readonly reloadLibrary: (() => Tokenizer) | null = null,
  ) {
    this.vocabSize = tokenizer.get_vocab(true).size;
    this.pieces = tokenizerJson ? PieceEncoder.create(tokenizer, tokenizerJson) : null;
    this.byteDecoder = tokenizerJson ? ByteLevelDecoder.create(tokenizer, tokenizerJson) : null;
    const added = [...tokenizer.get_added_tokens_decoder().values()];
    this.addedTokens = added.map((t) => t.content);
    this.addedIds = new Map(added.map((t) => [t.content, t.id]));
    const ownPaths = this.pieces?.encodesWithoutLibrary === true && this.byteDecoder?.decodesWithoutLibrary === true;
    this.tokenizer = ownPaths && reloadLibrary ? null : tokenizer;
  }

  /** Whether the library's tokenizer is held (false once encode and decode do without it). */
  get holdsLibrary(): boolean {
    return this.tokenizer !== null;
  }

  /** The library's tokenizer, loaded again if it was let go (a second or so for Qwen3); kept from then on. */
  private library(): Tokenizer {
    this.tokenizer ??= this.reloadLibrary!();
    return this.tokenizer;
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
    const reload = () => {
      const library = new Tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));
      releaseConstructionInputs(library);
      return library;
    };
    const chat_template = configJson["chat_template"];
    if (typeof chat_template !== "string")
      throw new ModelFilesError(modelDir, "tokenizer_config.json has no string chat_template");
    const tokenizer = new TextTokenizer(
      new Tokenizer(tokenizerJson, configJson),
      {
        chat_template,
        eos_token: tokenString(configJson["eos_token"]),
        bos_token: tokenString(configJson["bos_token"]),
        model_max_length: contextLength(configJson["model_max_length"]),
      },
      256,
      tokenizerJson,
      reload,
    );
    if (tokenizer.tokenizer) releaseConstructionInputs(tokenizer.tokenizer);
    return tokenizer;
  }

  /**
   * Appends the token ids of `text` to `out`; special-token strings in it become
   * their ids; no BOS/EOS is added. The proxy plans every prompt with this, so a
   * call's ids never become an array of their own (a 2k-token tool result was
   * ~80 KB of growing arrays per call, a third of what a call allocated).
   * `keepSections`: the text is likely to share long sections with later texts (a whole
   * render of a conversation's start: system prompt, tool list), so keep those sections'
   * ids (see PieceEncoder). Short texts are remembered whole in a small LRU.
   */
  encodeInto(text: string, out: Growable<Int32Array>, options: { keepSections?: boolean } = {}): void {
    if (text.length === 0) return;
    const remember = this.cacheEntries > 0 && text.length <= WHOLE_TEXT_CACHE_MAX_CHARS;
    if (remember) {
      const hit = this.cache.get(text);
      if (hit) {
        // Refresh recency (Map keeps insertion order).
        this.cache.delete(text);
        this.cache.set(text, hit);
        out.pushRange(hit, 0, hit.length);
        return;
      }
    }
    const start = out.length;
    if (this.pieces) this.pieces.encodeInto(text, out, options.keepSections === true);
    else {
      const ids = this.encodeWithLibrary(text);
      out.pushRange(ids, 0, ids.length);
    }
    if (remember) {
      this.cache.set(text, out.copy(start, out.length));
      if (this.cache.size > this.cacheEntries) this.cache.delete(this.cache.keys().next().value!);
    }
  }

  /** Token ids of `text` as a new array (see encodeInto). */
  encode(text: string, options: { keepSections?: boolean } = {}): number[] {
    const out = this.scratch;
    out.truncate(0);
    this.encodeInto(text, out, options);
    return Array.from(out.view());
  }

  /** The piece encoder's two ways of splitting a section (null for tokenizers it does not handle); for tests. */
  get pieceSplitters(): { regex(s: string): string[]; scanner(s: string): string[] | null } | null {
    const p = this.pieces;
    return p ? { regex: (s) => p.splitWithRegex(s), scanner: (s) => p.splitWithScanner(s) } : null;
  }

  /** The library's own encode, without the proxy's caches (the reference the fast path must equal). */
  encodeWithLibrary(text: string): number[] {
    return this.library().encode(text, { add_special_tokens: false }).ids;
  }

  /** Text of `ids`, special tokens included (tool-call and think tags are special in Qwen3). */
  decode(ids: ArrayLike<number>): string {
    if (ids.length === 0) return "";
    return this.byteDecoder?.decode(ids) ?? this.decodeWithLibrary(ids);
  }

  /** The library's own decode (the reference the fast path must equal). */
  decodeWithLibrary(ids: ArrayLike<number>): string {
    return this.library().decode(Array.from(ids), { skip_special_tokens: false });
  }

  /** The id of `token`: an added token's from memory, any other from the library's vocabulary. */
  tokenId(token: string): number | undefined {
    return this.addedIds.get(token) ?? this.library().token_to_id(token);
  }

  /** The id of a token that must exist (e.g. the end-of-turn token). */
  requireTokenId(token: string): number {
    const id = this.tokenId(token);
    if (id === undefined) throw new Error(`token ${JSON.stringify(token)} is not in the vocabulary`);
    return id;
  }

  get size(): number {
    return this.vocabSize;
  }
}

/**
 * The library keeps the parsed tokenizer.json (its vocabulary object and merge
 * list) after building its own maps from it, and never reads it again: in
 * @huggingface/tokenizers 0.2.0 `tokenizer`, `model.config` and `model.merges`
 * are read by the constructors only. Dropping them takes ~17 MB and some
 * 300 000 objects (Qwen3) off the heap that every full garbage collection of
 * the proxy process marks, which is the length of its longest pauses.
 * tokenizer.test.ts compares encodes of new text with the library's afterwards.
 */
function releaseConstructionInputs(tokenizer: Tokenizer): void {
  const t = tokenizer as unknown as { tokenizer?: unknown; model?: { config?: unknown; merges?: unknown; bpe_ranks?: unknown } };
  // Only for the model shape whose constructor is known to have used them up.
  if (!(t.model?.bpe_ranks instanceof Map) || t.tokenizer === undefined || t.model.config === undefined) return;
  t.tokenizer = null;
  t.model.config = {};
  t.model.merges = null;
}

/** transformers writes a huge sentinel (int(1e30)) when a tokenizer states no length. */
function contextLength(v: unknown): number | null {
  return typeof v === "number" && Number.isSafeInteger(v) && v > 0 && v < 1e9 ? v : null;
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

/** Texts longer than this are not kept whole (they rarely recur whole; their long sections may be kept). */
const WHOLE_TEXT_CACHE_MAX_CHARS = 4096;
/** Sections shorter than this are not worth a whole-section lookup. */
const SECTION_CACHE_MIN_CHARS = 256;
/** Total characters of kept sections before the section cache starts over. */
const SECTION_CACHE_MAX_CHARS = 8 * 1024 * 1024;

class PieceEncoder {
  private readonly table: PieceTable;
  private ascii = Buffer.allocUnsafe(1 << 14);
  private utf16 = new Uint16Array(256);
  private ends = new Int32Array(1 << 12);
  private readonly sections = new Map<string, Int32Array>();
  private sectionChars = 0;
  /** Added tokens, longest first: a regex alternation then takes the longest match at the leftmost position, as the library's trie does. */
  private readonly addedRe: RegExp;

  /** True when the Split regex is Qwen2's (Qwen2/2.5/3), which `splitQwen2Ascii` reproduces on ASCII text. */
  private readonly asciiSplit: boolean;

  private constructor(
    /** How a piece the table lacks is encoded: the proxy's own BPE, or the library's encode when its model is of another kind. */
    private readonly learner: ByteLevelBpe | Tokenizer,
    private readonly added: Map<string, { id: number }>,
    private readonly split: { pre_tokenize_text(text: string): string[]; pattern?: unknown },
    maxEntries = 200_000,
  ) {
    this.table = new PieceTable(maxEntries);
    const contents = [...added.keys()].sort((a, b) => b.length - a.length);
    this.addedRe = new RegExp(contents.map((c) => c.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|"), "g");
    this.asciiSplit = split.pattern instanceof RegExp && split.pattern.source === QWEN2_SPLIT_SOURCE;
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
    return new PieceEncoder(ByteLevelBpe.create(json["model"]) ?? tokenizer, internals.added_tokens_map, splitter);
  }

  /** True when no piece needs the library's model. */
  get encodesWithoutLibrary(): boolean {
    return this.learner instanceof ByteLevelBpe;
  }

  encodeInto(text: string, out: Growable<Int32Array>, keepSections: boolean): void {
    let start = 0;
    this.addedRe.lastIndex = 0;
    for (let m = this.addedRe.exec(text); m !== null; m = this.addedRe.exec(text)) {
      if (m.index > start) this.encodeSectionCached(text.slice(start, m.index), out, keepSections);
      out.push(this.added.get(m[0])!.id);
      start = m.index + m[0].length;
    }
    if (start < text.length) this.encodeSectionCached(text.slice(start), out, keepSections);
  }

  /**
   * Long sections (text between two added tokens) of whole renders, such as
   * a harness's system prompt and tool list that open every session's first
   * call, are kept whole (`keep`): sections tokenize independently, so their
   * ids are the same wherever they appear. Other long sections (tool output
   * in continuations) are looked up but not kept.
   */
  private encodeSectionCached(section: string, out: Growable<Int32Array>, keep: boolean): void {
    if (section.length < SECTION_CACHE_MIN_CHARS || (!keep && this.sections.size === 0)) return this.encodeSection(section, out);
    const ids = this.sections.get(section);
    if (ids !== undefined) return out.pushRange(ids, 0, ids.length);
    const start = out.length;
    this.encodeSection(section, out);
    if (keep) {
      if (this.sectionChars + section.length > SECTION_CACHE_MAX_CHARS) {
        this.sections.clear();
        this.sectionChars = 0;
      }
      this.sections.set(section, out.copy(start, out.length));
      this.sectionChars += section.length;
    }
  }

  private encodeSection(section: string, out: Growable<Int32Array>): void {
    const table = this.table;
    // Pure ASCII (most code and tool output) is NFC already and splits the same
    // with the scanner below as with the Split regex, without the regex engine.
    if (this.asciiSplit && !NON_ASCII.test(section)) {
      const bytes = this.asciiBytes(section);
      const ends = this.pieceEnds(section.length);
      const count = splitQwen2Ascii(bytes, section.length, ends);
      let a = 0;
      for (let k = 0; k < count; k++) {
        const b = ends[k]!;
        const h = hashUnits(bytes, a, b);
        if (!table.appendTo(bytes, a, b, h, out)) this.learn(section.slice(a, b), bytes, a, b, h, out);
        a = b;
      }
      return;
    }
    for (const piece of this.split.pre_tokenize_text(section.normalize("NFC"))) {
      const units = this.utf16Units(piece);
      const h = hashUnits(units, 0, piece.length);
      if (!table.appendTo(units, 0, piece.length, h, out)) this.learn(piece, units, 0, piece.length, h, out);
    }
  }

  /** `text`'s UTF-16 code units, in a buffer reused from call to call. */
  private utf16Units(text: string): Uint16Array {
    if (text.length > this.utf16.length) this.utf16 = new Uint16Array(Math.max(text.length, 2 * this.utf16.length));
    for (let i = 0; i < text.length; i++) this.utf16[i] = text.charCodeAt(i);
    return this.utf16;
  }

  /** `text` (ASCII) as bytes, in a buffer reused from call to call. */
  private asciiBytes(text: string): Buffer {
    if (text.length > this.ascii.length) this.ascii = Buffer.allocUnsafe(Math.max(text.length, 2 * this.ascii.length));
    this.ascii.write(text, 0, "latin1");
    return this.ascii;
  }

  private pieceEnds(atMost: number): Int32Array {
    if (atMost > this.ends.length) this.ends = new Int32Array(Math.max(atMost, 2 * this.ends.length));
    return this.ends;
  }

  /** Pieces of `section` from the Split regex (the reference the ASCII scanner must equal; tests compare them). */
  splitWithRegex(section: string): string[] {
    return this.split.pre_tokenize_text(section.normalize("NFC"));
  }

  /** Pieces of an ASCII `section` from the scanner, or null when the scanner does not apply. */
  splitWithScanner(section: string): string[] | null {
    if (!this.asciiSplit || NON_ASCII.test(section)) return null;
    const ends = this.pieceEnds(section.length);
    const count = splitQwen2Ascii(this.asciiBytes(section), section.length, ends);
    const pieces: string[] = [];
    for (let k = 0, a = 0; k < count; a = ends[k++]!) pieces.push(section.slice(a, ends[k]));
    return pieces;
  }

  /** Encodes `piece` (whose code units are `units[start, end)`), remembers its ids and appends them to `out`. */
  private learn(piece: string, units: CodeUnits, start: number, end: number, hash: number, out: Growable<Int32Array>): void {
    if (this.learner instanceof ByteLevelBpe) {
      const from = out.length;
      this.learner.encodeInto(piece, out);
      this.table.add(units, start, end, hash, out.view(from));
      return;
    }
    const ids = this.learner.encode(piece, { add_special_tokens: false }).ids;
    this.table.add(units, start, end, hash, ids);
    out.pushRange(ids, 0, ids.length);
  }
}

/**
 * The Split regex of Qwen2-family tokenizer.json as @huggingface/tokenizers
 * compiles it (flags "gu"):
 *   A '[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]
 *   B [^\r\n\p{L}\p{N}]?\p{L}+
 *   C \p{N}
 *   D  ?[^\p{White_Space}\p{L}\p{N}]+[\r\n]*
 *   E \p{White_Space}*[\r\n]+
 *   F \p{White_Space}+(?!\P{White_Space})
 *   G \p{White_Space}+
 */
const QWEN2_SPLIT_SOURCE =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\p{White_Space}\\p{L}\\p{N}]+[\\r\\n]*|\\p{White_Space}*[\\r\\n]+|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+";

const NON_ASCII = /[^\x00-\x7f]/;

/** ASCII classes of the regex: \p{L} = letters, \p{N} = digits, \p{White_Space} = \t \n \v \f \r and space. */
const LETTER = 1;
const DIGIT = 2;
const SPACE = 4;
const OTHER = 8;
const CLASS = new Uint8Array(128).map((_, c) =>
  (c >= 65 && c <= 90) || (c >= 97 && c <= 122) ? LETTER : c >= 48 && c <= 57 ? DIGIT : (c >= 9 && c <= 13) || c === 32 ? SPACE : OTHER,
);

/**
 * The pieces the Qwen2 Split regex cuts ASCII text (the bytes `s[0, n)`) into,
 * by trying the alternatives A-G at each position in order, with the regex's
 * greedy and backtracking semantics. Every ASCII character starts a match of
 * some alternative, so the pieces are contiguous: piece k is [ends[k-1], ends[k])
 * (from 0 for the first). Writes the ends and returns their count. Works on
 * bytes rather than the string: the text is usually a slice of a larger string,
 * whose characters V8 reads slower than a flat array's.
 */
function splitQwen2Ascii(s: Uint8Array, n: number, ends: Int32Array): number {
  let count = 0;
  let i = 0;
  while (i < n) {
    const c = s[i]!;
    const k = CLASS[c]!;
    const k1 = i + 1 < n ? CLASS[s[i + 1]!]! : 0;
    let end = -1;
    // A: contractions.
    if (c === 39 && i + 1 < n) {
      const x = s[i + 1]! | 0x20;
      const y = i + 2 < n ? s[i + 2]! | 0x20 : 0;
      if (x === 115 || x === 116 || x === 109 || x === 100) end = i + 2; // s t m d
      else if ((x === 114 || x === 118) && y === 101) end = i + 3; // re ve
      else if (x === 108 && y === 108) end = i + 3; // ll
    }
    if (end < 0) {
      if (k === LETTER || (k !== DIGIT && c !== 10 && c !== 13 && k1 === LETTER)) {
        // B: an optional non-letter, non-digit, non-newline character, then letters.
        let j = i + 1;
        while (j < n && CLASS[s[j]!] === LETTER) j++;
        end = j;
      } else if (k === DIGIT) {
        // C: one digit.
        end = i + 1;
      } else if (k === OTHER || (c === 32 && k1 === OTHER)) {
        // D: an optional space, then characters that are none of whitespace, letter, digit, then newlines.
        let j = i + 1;
        while (j < n && CLASS[s[j]!] === OTHER) j++;
        while (j < n && (s[j]! === 10 || s[j]! === 13)) j++;
        end = j;
      } else {
        // c is whitespace; [i, w) is its whole run.
        let w = i + 1;
        while (w < n && CLASS[s[w]!] === SPACE) w++;
        // E: whitespace up to and including the run's last newline.
        let lastNl = -1;
        for (let j = w - 1; j >= i; j--) {
          const x = s[j]!;
          if (x === 10 || x === 13) {
            lastNl = j;
            break;
          }
        }
        if (lastNl >= 0) end = lastNl + 1;
        // F: the run, minus its last character when a non-space follows; G: the run.
        else if (w === n || w - i === 1) end = w;
        else end = w - 1;
      }
    }
    ends[count++] = end;
    i = end;
  }
  return count;
}
