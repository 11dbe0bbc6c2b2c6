/**
 * Token ids of pre-tokenizer pieces, looked up by a range of the text they sit
 * in, given as code units (bytes for ASCII text, UTF-16 units otherwise). A
 * `Map<string, number[]>` needs each piece as a string of its own: one slice
 * (an allocation) and one hash of it per piece, which was most of the cost of
 * encoding a tool result. Here a hit is confirmed by comparing code units in
 * place, so a cached piece costs no allocation at all.
 *
 * Open addressing over flat typed arrays: the characters and ids of every entry
 * live in two pools, so entries hold no strings. That also means no entry keeps
 * alive the long text it was cut from (a slice of 13 or more characters would).
 */

import type { Growable } from "./growable.ts";

/** Text as code units: bytes of ASCII text, or UTF-16 code units. */
export type CodeUnits = Uint8Array | Uint16Array;

/** FNV-1a over `units[start, end)`. */
export function hashUnits(units: CodeUnits, start: number, end: number): number {
  let h = 0x811c9dc5 | 0;
  for (let i = start; i < end; i++) h = Math.imul(h ^ units[i]!, 0x01000193);
  return h;
}

export class PieceTable {
  /** Entry index + 1 per slot; 0 marks an empty slot. Kept at most half full. */
  private slots = new Int32Array(1 << 14);
  private count = 0;
  private hashes = new Int32Array(1 << 13);
  private charStart = new Int32Array(1 << 13);
  private charLength = new Int32Array(1 << 13);
  private idStart = new Int32Array(1 << 13);
  private idLength = new Int32Array(1 << 13);
  private chars = new Uint16Array(1 << 16);
  private charsUsed = 0;
  private ids = new Int32Array(1 << 15);
  private idsUsed = 0;

  /** `maxEntries`: when full, the table starts over (pieces of recent text are learned again). */
  constructor(private readonly maxEntries: number) {}

  get size(): number {
    return this.count;
  }

  /**
   * Appends the ids of the piece `units[start, end)` (whose `hashUnits` is `hash`)
   * to `out` and returns true; returns false, appending nothing, when it is unknown.
   */
  appendTo(units: CodeUnits, start: number, end: number, hash: number, out: Growable<Int32Array>): boolean {
    const e = this.find(units, start, end, hash);
    if (e < 0) return false;
    const from = this.idStart[e]!;
    out.pushRange(this.ids, from, from + this.idLength[e]!);
    return true;
  }

  /** Remembers `ids` for the piece `units[start, end)`; the piece must not be in the table. */
  add(units: CodeUnits, start: number, end: number, hash: number, ids: ArrayLike<number>): void {
    if (this.count >= this.maxEntries) this.clear();
    if (2 * (this.count + 1) > this.slots.length) this.rehash(this.slots.length * 2);
    const e = this.count++;
    if (e === this.hashes.length) this.growEntries();
    const n = end - start;
    if (this.charsUsed + n > this.chars.length) this.chars = grow(this.chars, this.charsUsed + n);
    if (this.idsUsed + ids.length > this.ids.length) this.ids = grow(this.ids, this.idsUsed + ids.length);
    this.chars.set(units.subarray(start, end), this.charsUsed);
    for (let i = 0; i < ids.length; i++) this.ids[this.idsUsed + i] = ids[i]!;
    this.hashes[e] = hash;
    this.charStart[e] = this.charsUsed;
    this.charLength[e] = n;
    this.idStart[e] = this.idsUsed;
    this.idLength[e] = ids.length;
    this.charsUsed += n;
    this.idsUsed += ids.length;
    this.place(e);
  }

  clear(): void {
    this.slots.fill(0);
    this.count = 0;
    this.charsUsed = 0;
    this.idsUsed = 0;
  }

  private find(units: CodeUnits, start: number, end: number, hash: number): number {
    const slots = this.slots;
    const mask = slots.length - 1;
    const n = end - start;
    for (let s = hash & mask; ; s = (s + 1) & mask) {
      const slot = slots[s]!;
      if (slot === 0) return -1;
      const e = slot - 1;
      if (this.hashes[e] !== hash || this.charLength[e] !== n) continue;
      const at = this.charStart[e]!;
      let i = 0;
      while (i < n && this.chars[at + i] === units[start + i]) i++;
      if (i === n) return e;
    }
  }

  private place(e: number): void {
    const slots = this.slots;
    const mask = slots.length - 1;
    let s = this.hashes[e]! & mask;
    while (slots[s] !== 0) s = (s + 1) & mask;
    slots[s] = e + 1;
  }

  private rehash(size: number): void {
    this.slots = new Int32Array(size);
    for (let e = 0; e < this.count; e++) this.place(e);
  }

  private growEntries(): void {
    const n = this.hashes.length * 2;
    this.hashes = grow(this.hashes, n);
    this.charStart = grow(this.charStart, n);
    this.charLength = grow(this.charLength, n);
    this.idStart = grow(this.idStart, n);
    this.idLength = grow(this.idLength, n);
  }
}

function grow<T extends Int32Array | Uint16Array>(a: T, atLeast: number): T {
  let n = a.length * 2;
  while (n < atLeast) n *= 2;
  const next = new (a.constructor as new (n: number) => T)(n);
  next.set(a as never);
  return next;
}
