/**
 * Arrow IPC streams framed into reused memory.
 *
 * arrow-js's writer hands its sink the flatbuffer metadata, the padding and the
 * column buffers themselves; `toUint8Array` then joins them into a fresh,
 * zero-filled allocation per batch. On the 2-core VM a first touch of fresh
 * pages runs at ~0.3 GB/s and a copy into reused memory at ~12 GB/s, so this
 * module collects the chunks (references, no copy) and joins them once, where
 * they must go: the spool file's mapped pages (spool.ts) or a buffer from a
 * `PayloadPool`. The bytes are exactly `encodeBatch`'s.
 */
import { RecordBatchStreamWriter, type RecordBatch } from "apache-arrow";

/** A writer whose sink is a list of chunk references. */
class ChunkCollector extends RecordBatchStreamWriter {
  readonly chunks: Uint8Array[] = [];
  length = 0;

  protected override _write(chunk: ArrayBufferView): this {
    if (this._started && chunk.byteLength > 0) {
      this.chunks.push(chunk instanceof Uint8Array ? chunk : new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      this.length += chunk.byteLength;
      this._position += chunk.byteLength;
    }
    return this;
  }
}

/**
 * Reusable payload buffers. `acquire` hands out a view of a pooled buffer (or
 * a fresh one when the pool is empty or too small); `release` returns it once
 * nothing can still read it (for the sender: once the receiver acked it).
 */
export class PayloadPool {
  private readonly free: ArrayBuffer[] = [];
  private pooled = 0;

  constructor(
    /** Buffers kept for reuse; beyond it released buffers go to the GC. */
    readonly capacity: number,
  ) {}

  acquire(size: number): Uint8Array {
    const index = this.free.findIndex((b) => b.byteLength >= size);
    if (index >= 0) return new Uint8Array(this.free.splice(index, 1)[0]!, 0, size);
    // Round up so that slightly larger later batches still fit a pooled buffer.
    const capacity = this.pooled < this.capacity ? Math.ceil((size * 1.25) / 65536) * 65536 : size;
    if (this.pooled < this.capacity) this.pooled += 1;
    return new Uint8Array(new ArrayBuffer(capacity), 0, size);
  }

  release(view: Uint8Array): void {
    if (this.free.length < this.capacity) this.free.push(view.buffer as ArrayBuffer);
  }
}

/** One record batch framed as an IPC stream, not yet joined: its length, and a copy into any target. */
export interface CollectedFrame {
  readonly length: number;
  /** Writes the stream's bytes to target[0, length); the chunks may view scratch memory, so call it before that is reset. */
  writeTo(target: Uint8Array): void;
}

export function collectFrame(batch: RecordBatch): CollectedFrame {
  const writer = new ChunkCollector();
  writer.write(batch);
  writer.finish();
  return {
    length: writer.length,
    writeTo(target: Uint8Array): void {
      let at = 0;
      for (const chunk of writer.chunks) {
        target.set(chunk, at);
        at += chunk.length;
      }
    },
  };
}

/** Frames one record batch as an IPC stream into a buffer from `pool`. */
export function frameInto(batch: RecordBatch, pool: PayloadPool): Uint8Array {
  const frame = collectFrame(batch);
  const out = pool.acquire(frame.length);
  frame.writeTo(out);
  return out;
}

/**
 * Bump-allocated scratch memory for one batch's column concatenations
 * (EncodeOptions.scratch), reset after the batch is framed. It grows to the
 * largest batch seen and is then reused for every batch.
 */
export class ScratchArena {
  private buffer = new ArrayBuffer(0);
  private used = 0;

  readonly take = (bytes: number): { buffer: ArrayBuffer; byteOffset: number } => {
    const start = (this.used + 7) & ~7; // typed-array views need their element alignment; 8 covers all
    if (start + bytes > this.buffer.byteLength) {
      // Views already handed out keep the old buffer alive until this batch is framed.
      this.buffer = new ArrayBuffer(Math.max(bytes, this.buffer.byteLength * 2, 1 << 20));
      this.used = bytes;
      return { buffer: this.buffer, byteOffset: 0 };
    }
    this.used = start + bytes;
    return { buffer: this.buffer, byteOffset: start };
  };

  reset(): void {
    this.used = 0;
  }
}
