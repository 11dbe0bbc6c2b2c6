/**
 * Byte-level BPE (GPT-2, Qwen) on token ids, for the pieces the proxy's
 * tokenizer has not seen before (tokenizer.ts caches every piece it learns).
 *
 * Why not the library's model: @huggingface/tokenizers keeps the vocabulary
 * and the merge list as JS Maps keyed by strings, some 300 000 strings and
 * 31 MB of heap for Qwen3. They live as long as the proxy, and every full
 * collection marks them: half of each collection's marking, which runs on the
 * proxy's event loop while calls wait (docs/benchmarks.md, 2026-12-07, fourth
 * session). Here the merges are a table of id pairs in flat typed arrays that
 * the collector never walks, built once from tokenizer.json, and the proxy lets
 * the library's model go.
 *
 * The algorithm is the library's: the piece's UTF-8 bytes become the byte
 * alphabet's tokens, then the adjacent pair with the lowest merge rank is
 * merged, the leftmost first among equal ranks, until no pair has a rank.
 * tokenizer.test.ts compares the two on text that exercises every byte.
 */
import type { Growable } from "./growable.ts";

/** The tokenizer.json `model` fields this reads. */
interface BpeModelJson {
  type?: string;
  vocab?: Record<string, number>;
  merges?: Array<string | [string, string]>;
  unk_token?: string | null;
  dropout?: number | null;
  continuing_subword_prefix?: string | null;
  end_of_word_suffix?: string | null;
  byte_fallback?: boolean;
  ignore_merges?: boolean;
}

const EMPTY = -1;
/**
 * Working arrays grown past this many bytes are dropped once the piece that needed them is
 * encoded: one huge piece (a request body may hold a 30 MB run of letters) must not pin
 * ~40 bytes per character of it for the life of the process.
 */
const KEEP_BYTES = 1 << 16;
const INITIAL_BYTES = 64;

export class ByteLevelBpe {
  /** Open addressing over (left id, right id): the merge's rank and the id it makes. */
  private readonly left: Int32Array;
  private readonly right: Int32Array;
  private readonly rank: Int32Array;
  private readonly merged: Int32Array;
  private readonly mask: number;
  private readonly encoder = new TextEncoder();
  /** Working arrays of one encode, grown as pieces need. */
  private bytes = new Uint8Array(INITIAL_BYTES);
  private symbol = new Int32Array(INITIAL_BYTES);
  private next = new Int32Array(INITIAL_BYTES);
  private prev = new Int32Array(INITIAL_BYTES);
  private heapRank = new Int32Array(2 * INITIAL_BYTES);
  private heapAt = new Int32Array(2 * INITIAL_BYTES);

  private constructor(
    /** The id of each byte's one-character token. */
    private readonly byteIds: Int32Array,
    merges: Array<[number, number, number]>,
  ) {
    let size = 1;
    while (size < 2 * merges.length + 2) size *= 2;
    this.left = new Int32Array(size).fill(EMPTY);
    this.right = new Int32Array(size);
    this.rank = new Int32Array(size);
    this.merged = new Int32Array(size);
    this.mask = size - 1;
    // A pair listed twice keeps its later rank, as the library's Map does.
    merges.forEach(([a, b, m], r) => {
      const slot = this.slotFor(a, b);
      this.left[slot] = a;
      this.right[slot] = b;
      this.rank[slot] = r;
      this.merged[slot] = m;
    });
  }

  /**
   * The BPE of a tokenizer.json `model` when it is plain byte-level BPE (no dropout, no
   * unknown token, no subword affixes, merges applied to every piece) whose merges all
   * join two tokens of the vocabulary into a third; null otherwise (the library's model
   * stays in use).
   */
  static create(model: unknown): ByteLevelBpe | null {
    const m = model as BpeModelJson | null;
    if (!m || m.type !== "BPE" || !m.vocab || !Array.isArray(m.merges)) return null;
    if (m.unk_token != null || m.dropout != null || m.byte_fallback || m.ignore_merges || m.continuing_subword_prefix || m.end_of_word_suffix) return null;
    const vocab = new Map(Object.entries(m.vocab));
    const byteIds = new Int32Array(256);
    for (const [byte, ch] of byteAlphabet()) {
      const id = vocab.get(ch);
      if (id === undefined) return null;
      byteIds[byte] = id;
    }
    const merges: Array<[number, number, number]> = [];
    for (const entry of m.merges) {
      // The library splits the old "a b" form with split(" ", 2).
      const [x, y] = typeof entry === "string" ? entry.split(" ", 2) : entry;
      const a = x === undefined ? undefined : vocab.get(x);
      const b = y === undefined ? undefined : vocab.get(y);
      const joined = x === undefined || y === undefined ? undefined : vocab.get(x + y);
      if (a === undefined || b === undefined || joined === undefined) return null;
      merges.push([a, b, joined]);
    }
    return new ByteLevelBpe(byteIds, merges);
  }

  /** Appends the ids of `piece` (one pre-tokenizer piece, NFC already) to `out`. */
  encodeInto(piece: string, out: Growable<Int32Array>): void {
    if (3 * piece.length > this.bytes.length) this.grow(3 * piece.length);
    const n = this.encoder.encodeInto(piece, this.bytes).written;
    if (n === 0) return;
    const { symbol, next, prev, bytes } = this;
    for (let i = 0; i < n; i++) {
      symbol[i] = this.byteIds[bytes[i]!]!;
      next[i] = i + 1 < n ? i + 1 : EMPTY;
      prev[i] = i - 1;
    }
    let heap = 0;
    const push = (at: number) => {
      const slot = this.find(symbol[at]!, symbol[next[at]!]!);
      if (slot === EMPTY) return;
      heap = this.heapPush(heap, this.rank[slot]!, at);
    };
    for (let i = 0; i + 1 < n; i++) push(i);
    while (heap > 0) {
      const r = this.heapRank[0]!;
      const at = this.heapAt[0]!;
      heap = this.heapPop(heap);
      const after = next[at]!;
      if (symbol[at] === EMPTY || after === EMPTY) continue;
      // An entry made before a neighbour merged is stale unless the pair there now has its rank (ranks are unique to a pair).
      const slot = this.find(symbol[at]!, symbol[after]!);
      if (slot === EMPTY || this.rank[slot] !== r) continue;
      symbol[at] = this.merged[slot]!;
      symbol[after] = EMPTY;
      const beyond = next[after]!;
      next[at] = beyond;
      if (beyond !== EMPTY) prev[beyond] = at;
      if (prev[at]! >= 0) push(prev[at]!);
      if (beyond !== EMPTY) push(at);
    }
    // A merge keeps its left position, so the first byte's position always starts the list.
    for (let i = 0; i !== EMPTY; i = next[i]!) out.push(symbol[i]!);
    if (this.bytes.length > KEEP_BYTES) this.grow(INITIAL_BYTES);
    if (this.heapRank.length > 2 * KEEP_BYTES) {
      this.heapRank = new Int32Array(2 * INITIAL_BYTES);
      this.heapAt = new Int32Array(2 * INITIAL_BYTES);
    }
  }

  /** Bytes the working arrays hold now (for tests: a huge piece's are let go). */
  get workingBytes(): number {
    return this.bytes.length;
  }

  private slotFor(a: number, b: number): number {
    let s = hashPair(a, b) & this.mask;
    while (this.left[s] !== EMPTY && (this.left[s] !== a || this.right[s] !== b)) s = (s + 1) & this.mask;
    return s;
  }

  private find(a: number, b: number): number {
    const s = this.slotFor(a, b);
    return this.left[s] === EMPTY ? EMPTY : s;
  }

  /** Min-heap on (rank, position): the leftmost of equal ranks first, as the library breaks ties. */
  private heapPush(size: number, r: number, at: number): number {
    if (size === this.heapRank.length) {
      this.heapRank = growInt32(this.heapRank, 2 * size);
      this.heapAt = growInt32(this.heapAt, 2 * size);
    }
    const hr = this.heapRank;
    const ha = this.heapAt;
    let i = size;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (hr[p]! < r || (hr[p] === r && ha[p]! < at)) break;
      hr[i] = hr[p]!;
      ha[i] = ha[p]!;
      i = p;
    }
    hr[i] = r;
    ha[i] = at;
    return size + 1;
  }

  private heapPop(size: number): number {
    const hr = this.heapRank;
    const ha = this.heapAt;
    const last = size - 1;
    const r = hr[last]!;
    const at = ha[last]!;
    let i = 0;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= last) break;
      if (c + 1 < last && (hr[c + 1]! < hr[c]! || (hr[c + 1] === hr[c] && ha[c + 1]! < ha[c]!))) c++;
      if (r < hr[c]! || (r === hr[c] && at < ha[c]!)) break;
      hr[i] = hr[c]!;
      ha[i] = ha[c]!;
      i = c;
    }
    hr[i] = r;
    ha[i] = at;
    return last;
  }

  private grow(bytes: number): void {
    this.bytes = new Uint8Array(bytes);
    this.symbol = new Int32Array(bytes);
    this.next = new Int32Array(bytes);
    this.prev = new Int32Array(bytes);
  }
}

function hashPair(a: number, b: number): number {
  let h = Math.imul(a, 0x9e3779b1) ^ b;
  h = Math.imul(h ^ (h >>> 15), 0x85ebca6b);
  return h ^ (h >>> 13);
}

function growInt32(a: Int32Array, n: number): Int32Array<ArrayBuffer> {
  const next = new Int32Array(n);
  next.set(a);
  return next;
}

/**
 * GPT-2's byte alphabet: each byte as one printable character. The printable
 * bytes stand for themselves; the others (controls, space, and a few more) take
 * the characters from U+0100 on, in byte order.
 */
function byteAlphabet(): Array<[number, string]> {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const out: Array<[number, string]> = [];
  let shifted = 0;
  for (let b = 0; b < 256; b++) out.push([b, String.fromCharCode(printable(b) ? b : 256 + shifted++)]);
  return out;
}
