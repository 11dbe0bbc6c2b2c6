/** An append-only typed array with amortised O(1) push; `view()` is a zero-copy window. */
type TypedArrayCtor<T> = { new (n: number): T };
type Typed = Int32Array | Float32Array | Uint8Array | Uint16Array;

export class Growable<T extends Typed> {
  private buf: T;
  length = 0;

  constructor(private readonly ctor: TypedArrayCtor<T>, capacity = 1024) {
    this.buf = new ctor(capacity);
  }

  private reserve(extra: number): void {
    const need = this.length + extra;
    if (need <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < need) cap *= 2;
    const next = new this.ctor(cap);
    next.set(this.buf.subarray(0, this.length) as never);
    this.buf = next;
  }

  push(value: number): void {
    if (this.length === this.buf.length) this.reserve(1);
    this.buf[this.length++] = value;
  }

  /**
   * Appends `values[from, to)` element by element: for the short runs the
   * tokenizer appends (a piece's 1-3 ids) this beats a `subarray` view, which
   * is an object per call.
   */
  pushRange(values: ArrayLike<number>, from: number, to: number): void {
    this.reserve(to - from);
    const buf = this.buf;
    let n = this.length;
    for (let i = from; i < to; i++) buf[n++] = values[i]!;
    this.length = n;
  }

  pushAll(values: ArrayLike<number>): void {
    this.reserve(values.length);
    this.buf.set(values as never, this.length);
    this.length += values.length;
  }

  /** Appends `n` copies of `value`. */
  fill(value: number, n: number): void {
    this.reserve(n);
    this.buf.fill(value, this.length, this.length + n);
    this.length += n;
  }

  truncate(n: number): void {
    this.length = Math.min(this.length, n);
  }

  at(i: number): number {
    return this.buf[i]!;
  }

  /**
   * A zero-copy window of the current buffer. Pushes never change [start, end) of it
   * (a push past the capacity moves to a new buffer and leaves this one as it was); a
   * truncate below `end` followed by pushes does overwrite it.
   */
  view(start = 0, end = this.length): T {
    return this.buf.subarray(start, end) as T;
  }

  /** An owned copy. */
  copy(start = 0, end = this.length): T {
    return this.buf.slice(start, end) as T;
  }
}
