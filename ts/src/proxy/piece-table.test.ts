import { describe, expect, it } from "vitest";
import { Growable } from "./growable.ts";
import { PieceTable, hashUnits } from "./piece-table.ts";

/** UTF-16 code units of `text`. */
const u = (text: string) => Uint16Array.from({ length: text.length }, (_, i) => text.charCodeAt(i));
const hashRange = (text: string, start: number, end: number) => hashUnits(u(text), start, end);
const add = (table: PieceTable, text: string, start: number, end: number, hash: number, ids: number[]) => table.add(u(text), start, end, hash, ids);

function lookup(table: PieceTable, text: string, start: number, end: number, hash = hashRange(text, start, end)): number[] | null {
  const out = new Growable(Int32Array);
  return table.appendTo(u(text), start, end, hash, out) ? Array.from(out.view()) : null;
}

describe("PieceTable", () => {
  it("finds a piece by its range inside any text, and only that piece", () => {
    const table = new PieceTable(1000);
    add(table, "xx return yy", 2, 9, hashRange("xx return yy", 2, 9), [470]);
    expect(lookup(table, " return", 0, 7)).toEqual([470]);
    expect(lookup(table, "a return b", 1, 8)).toEqual([470]);
    expect(lookup(table, " returns", 0, 8)).toBeNull();
    expect(lookup(table, " retur", 0, 6)).toBeNull();
  });

  it("tells pieces apart when their hashes collide", () => {
    const table = new PieceTable(1000);
    add(table, "abc", 0, 3, 7, [1, 2]);
    add(table, "abd", 0, 3, 7, [3]);
    add(table, "ab", 0, 2, 7, [4]);
    expect(lookup(table, "abc", 0, 3, 7)).toEqual([1, 2]);
    expect(lookup(table, "abd", 0, 3, 7)).toEqual([3]);
    expect(lookup(table, "ab", 0, 2, 7)).toEqual([4]);
    expect(lookup(table, "abe", 0, 3, 7)).toBeNull();
  });

  it("agrees with a Map over many pieces while it grows, and appends ids without touching what is there", () => {
    const table = new PieceTable(1_000_000);
    const reference = new Map<string, number[]>();
    let seed = 3;
    const rnd = () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32);
    for (let n = 0; n < 50_000; n++) {
      const piece = Array.from({ length: 1 + Math.floor(rnd() * 12) }, () => String.fromCharCode(32 + Math.floor(rnd() * 200))).join("");
      if (reference.has(piece)) continue;
      const ids = Array.from({ length: 1 + Math.floor(rnd() * 4) }, () => Math.floor(rnd() * 150_000));
      reference.set(piece, ids);
      add(table, `<${piece}>`, 1, piece.length + 1, hashRange(piece, 0, piece.length), ids);
    }
    expect(table.size).toBe(reference.size);
    for (const [piece, ids] of reference) {
      const out = new Growable(Int32Array, 1);
      out.push(-1);
      expect(table.appendTo(u(piece), 0, piece.length, hashRange(piece, 0, piece.length), out)).toBe(true);
      expect(Array.from(out.view())).toEqual([-1, ...ids]);
    }
  });

  it("finds ASCII pieces given as bytes the same as given as 16-bit code units", () => {
    const table = new PieceTable(1000);
    const text = "let x = await fetch(url);";
    add(table, text, 7, 13, hashRange(text, 7, 13), [9, 8]); // " await"
    const bytes = Buffer.from(`>>${text}`, "latin1");
    const out = new Growable(Int32Array);
    expect(table.appendTo(bytes, 9, 15, hashRange(text, 7, 13), out)).toBe(true);
    expect(Array.from(out.view())).toEqual([9, 8]);
    expect(table.appendTo(bytes, 9, 14, hashRange(text, 7, 12), out)).toBe(false);
  });

  it("starts over when full", () => {
    const table = new PieceTable(2);
    add(table, "a", 0, 1, hashRange("a", 0, 1), [1]);
    add(table, "b", 0, 1, hashRange("b", 0, 1), [2]);
    add(table, "c", 0, 1, hashRange("c", 0, 1), [3]);
    expect(table.size).toBe(1);
    expect(lookup(table, "a", 0, 1)).toBeNull();
    expect(lookup(table, "c", 0, 1)).toEqual([3]);
  });
});
