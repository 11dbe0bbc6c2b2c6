/**
 * Decoding ids to text for byte-level BPE tokenizers (GPT-2, Qwen), which the
 * proxy does for every chunk the engine streams.
 *
 * @huggingface/tokenizers decodes by looking each token up in the list of
 * added tokens (a linear search per token), joining the token strings, and
 * mapping every character back to its byte through a dictionary. Here each
 * id's bytes are computed once from the library's own vocabulary and byte map,
 * so a decode is a copy of bytes and one UTF-8 decode per run between added
 * tokens. The result is the library's, including U+FFFD for bytes that are not
 * yet a whole character (byte-level-decoder.test.ts checks both against each other).
 * An id with no token (past the vocabulary, as engines pad it) decodes to nothing,
 * as in the library when the model has no unknown token.
 */

/** Internals of @huggingface/tokenizers 0.2.0 this reads; checked, so another shape keeps the library's decode. */
interface DecoderInternals {
  model?: { vocab?: Array<string | undefined>; unk_token?: string | null };
  decoder?: { byte_decoder?: Record<string, number>; end_of_word_suffix?: string | null } | null;
  added_tokens?: Array<{ content: string }>;
  clean_up_tokenization_spaces?: boolean;
}

/** Left to the library (a token outside the byte alphabet, or any id without a token when the model has an unknown token). */
const UNKNOWN = -1;
const ADDED = -2;
/** No token and no unknown token: the library decodes it to nothing. */
const ABSENT = -3;

export class ByteLevelDecoder {
  private scratch = new Uint8Array(256);
  private readonly text = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

  private constructor(
    /** The bytes of every token, back to back. */
    private readonly bytes: Uint8Array,
    /** Per id: where its bytes start in `bytes` (they end where the next id's start), or UNKNOWN / ADDED. */
    private readonly start: Int32Array,
    private readonly end: Int32Array,
    /** Text of the added tokens, by id. */
    private readonly added: Map<number, string>,
    /** What an id past `start` is: ABSENT or UNKNOWN. */
    private readonly beyond: number,
    /** True when no id is UNKNOWN: decode never needs the library. */
    readonly decodesWithoutLibrary: boolean,
  ) {}

  /**
   * A decoder equal to `tokenizer.decode(ids, { skip_special_tokens: false })`
   * when the tokenizer.json decoder is plain ByteLevel; null otherwise.
   */
  static create(tokenizer: unknown, tokenizerJson: Record<string, unknown>): ByteLevelDecoder | null {
    const t = tokenizer as DecoderInternals;
    const spec = tokenizerJson["decoder"] as { type?: string } | null | undefined;
    const byteMap = t.decoder?.byte_decoder;
    const vocab = t.model?.vocab;
    if (spec?.type !== "ByteLevel" || !byteMap || !vocab || !t.added_tokens || t.clean_up_tokenization_spaces !== false || t.decoder?.end_of_word_suffix)
      return null;
    const addedContents = new Set(t.added_tokens.map((a) => a.content));
    // The byte alphabet is 256 characters of the Basic Multilingual Plane: index it by code unit.
    const byteOf = new Int16Array(0x10000).fill(-1);
    for (const [ch, b] of Object.entries(byteMap)) if (ch.length === 1) byteOf[ch.charCodeAt(0)] = b;
    const added = new Map<number, string>();
    const noToken = t.model?.unk_token == null ? ABSENT : UNKNOWN;
    const start = new Int32Array(vocab.length).fill(noToken);
    let allBytes = noToken === ABSENT;
    const end = new Int32Array(vocab.length);
    let bytes = new Uint8Array(1 << 20);
    let used = 0;
    for (let id = 0; id < vocab.length; id++) {
      const token = vocab[id];
      if (token === undefined) continue;
      if (addedContents.has(token)) {
        start[id] = ADDED;
        added.set(id, token);
        continue;
      }
      if (used + token.length > bytes.length) {
        const bigger = new Uint8Array(2 * bytes.length);
        bigger.set(bytes);
        bytes = bigger;
      }
      let ok = true;
      for (let i = 0; i < token.length && ok; i++) {
        const b = byteOf[token.charCodeAt(i)]!;
        if (b < 0) ok = false;
        else bytes[used + i] = b;
      }
      // A token outside the byte alphabet is left to the library.
      if (!ok) {
        start[id] = UNKNOWN;
        allBytes = false;
        continue;
      }
      start[id] = used;
      end[id] = used + token.length;
      used += token.length;
    }
    return new ByteLevelDecoder(bytes.slice(0, used), start, end, added, noToken, allBytes);
  }

  /** The text of `ids`, or null when one of them is not in the table (the caller asks the library). */
  decode(ids: ArrayLike<number>): string | null {
    let out = "";
    let n = 0;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      const from = id >= 0 && id < this.start.length ? this.start[id]! : this.beyond;
      if (from === UNKNOWN) return null;
      if (from === ABSENT) continue;
      if (from === ADDED) {
        if (n > 0) out += this.text.decode(this.scratch.subarray(0, n));
        n = 0;
        out += this.added.get(id)!;
        continue;
      }
      const len = this.end[id]! - from;
      if (n + len > this.scratch.length) {
        const bigger = new Uint8Array(Math.max(2 * this.scratch.length, n + len));
        bigger.set(this.scratch.subarray(0, n));
        this.scratch = bigger;
      }
      for (let k = 0; k < len; k++) this.scratch[n + k] = this.bytes[from + k]!;
      n += len;
    }
    if (n > 0) out += this.text.decode(this.scratch.subarray(0, n));
    return out;
  }
}
