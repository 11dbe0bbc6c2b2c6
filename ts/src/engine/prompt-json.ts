/**
 * A prompt's token ids as the bytes of a JSON array, for the HTTP engine clients.
 *
 * An agent's prompts are 10^4-10^5 ids and each one repeats the last with a few
 * thousand new ids at the end. Writing every id's digits again per call (what
 * `ids.join(",")` does) costs the proxy O(prompt) per call, milliseconds on a
 * loaded host; here the digits of each conversation's last prompt are kept
 * (keyed by `GenerateRequest.prefix_key`) and only the ids past the common prefix
 * are written. The bytes are exactly those of `[${ids.join(",")}]`: the engine
 * receives the whole prompt as before, so nothing depends on it keeping anything.
 *
 * Memory is bounded by `maxTokens` ids held over all keys (least recently used
 * conversations go first); a key's entry is dropped and rebuilt whenever it would
 * be wrong to reuse (it is compared id by id against the new prompt).
 */

/** Defaults of `PromptJson` in one place. */
export const PROMPT_JSON_DEFAULTS = {
  /** Ids kept over all conversations: each costs ~15 bytes (a copy of the id, its digits, its end offset). */
  maxTokens: 2_000_000,
} as const;

const COMMA = 44;
const MINUS = 45;
const ZERO = 48;
/** The longest int32 in decimal ("-2147483648") plus its comma. */
const MAX_ID_BYTES = 12;

interface Entry {
  /** A copy of the last prompt's ids (the caller may reuse its buffer). */
  ids: Int32Array;
  /** Ids in use of `ids`. */
  n: number;
  /** Digits and commas of ids[0..n), without the brackets. */
  bytes: Uint8Array;
  /** ends[i]: offset in `bytes` just past id i's digits. */
  ends: Uint32Array;
}

export class PromptJson {
  private readonly entries = new Map<string, Entry>();
  private held = 0;

  constructor(private readonly maxTokens: number = PROMPT_JSON_DEFAULTS.maxTokens) {
    if (!Number.isInteger(maxTokens) || maxTokens < 0) throw new RangeError(`PromptJson: maxTokens must be a whole number >= 0, got ${maxTokens}`);
  }

  /** Ids now held over all conversations (for tests and logs). */
  get heldTokens(): number {
    return this.held;
  }

  /**
   * `head` + `[ids]` + `tail` as UTF-8 bytes the caller owns. With a `key`, the
   * digits of that key's previous prompt are reused up to where the two differ.
   */
  body(head: string, ids: ArrayLike<number>, tail: string, key?: string | null): Uint8Array<ArrayBuffer> {
    const e = this.update(ids, key ?? null);
    const used = ids.length === 0 ? 0 : e.ends[ids.length - 1]!;
    const headBytes = Buffer.from(head + "[");
    const tailBytes = Buffer.from("]" + tail);
    const out = new Uint8Array(headBytes.length + used + tailBytes.length);
    out.set(headBytes, 0);
    out.set(e.bytes.subarray(0, used), headBytes.length);
    out.set(tailBytes, headBytes.length + used);
    return out;
  }

  private update(ids: ArrayLike<number>, key: string | null): Entry {
    let e = key === null ? undefined : this.entries.get(key);
    let from = 0;
    if (e) {
      this.entries.delete(key!);
      this.held -= e.n;
      const m = Math.min(e.n, ids.length);
      while (from < m && e.ids[from] === ids[from]) from++;
    } else e = { ids: new Int32Array(ids.length), n: 0, bytes: new Uint8Array(ids.length * 7 + MAX_ID_BYTES), ends: new Uint32Array(ids.length) };
    write(e, ids, from);
    if (key !== null && ids.length <= this.maxTokens) {
      this.entries.set(key, e);
      this.held += e.n;
      for (const [oldest, old] of this.entries) {
        if (this.held <= this.maxTokens) break;
        this.entries.delete(oldest);
        this.held -= old.n;
      }
    }
    return e;
  }
}

/** Writes ids[from..) into `e` after its first `from` ids (which match). */
function write(e: Entry, ids: ArrayLike<number>, from: number): void {
  const n = ids.length;
  if (e.ids.length < n) {
    const cap = Math.max(n, e.ids.length * 2);
    const grownIds = new Int32Array(cap);
    grownIds.set(e.ids.subarray(0, from));
    const grownEnds = new Uint32Array(cap);
    grownEnds.set(e.ends.subarray(0, from));
    e.ids = grownIds;
    e.ends = grownEnds;
  }
  let bytes = e.bytes;
  let p = from === 0 ? 0 : e.ends[from - 1]!;
  for (let i = from; i < n; i++) {
    if (p + MAX_ID_BYTES > bytes.length) {
      const grown = new Uint8Array(Math.max(bytes.length * 2, p + MAX_ID_BYTES * (n - i)));
      grown.set(bytes.subarray(0, p));
      bytes = grown;
    }
    const id = ids[i]!;
    if (!Number.isInteger(id) || id < -0x80000000 || id > 0x7fffffff) throw new RangeError(`prompt id ${i} is ${id}, not an int32 token id`);
    e.ids[i] = id;
    if (i > 0) bytes[p++] = COMMA;
    let v = id;
    if (v < 0) {
      bytes[p++] = MINUS;
      v = -v;
    }
    // Digits backwards, then reversed in place: no string per id.
    const start = p;
    do {
      bytes[p++] = ZERO + (v % 10);
      v = Math.floor(v / 10);
    } while (v > 0);
    for (let a = start, b = p - 1; a < b; a++, b--) {
      const t = bytes[a]!;
      bytes[a] = bytes[b]!;
      bytes[b] = t;
    }
    e.ends[i] = p;
  }
  e.bytes = bytes;
  e.n = n;
}
