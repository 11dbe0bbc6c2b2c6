/** Exact comparison of records: typed arrays compare by type and bytes, so NaN payloads count. */

type Typed = ArrayBufferView & { length: number };

function bytesOf(view: ArrayBufferView): Buffer {
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength);
}

/** Every place where `actual` differs from `expected`; empty when they are identical. */
export function recordDifferences(expected: unknown, actual: unknown, path = ""): string[] {
  if (ArrayBuffer.isView(expected) || ArrayBuffer.isView(actual)) {
    if (!ArrayBuffer.isView(expected) || !ArrayBuffer.isView(actual) || expected.constructor !== actual.constructor) {
      return [`${path}: expected ${expected?.constructor?.name}, got ${(actual as object)?.constructor?.name}`];
    }
    const e = expected as Typed;
    const a = actual as Typed;
    if (e.length !== a.length) return [`${path}: expected ${e.length} values, got ${a.length}`];
    return bytesOf(e).equals(bytesOf(a)) ? [] : [`${path}: values differ`];
  }
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual) || actual.length !== expected.length) {
      return [`${path}: expected an array of ${expected.length}, got ${JSON.stringify(actual)?.slice(0, 80)}`];
    }
    return expected.flatMap((e, i) => recordDifferences(e, actual[i], `${path}[${i}]`));
  }
  if (expected !== null && typeof expected === "object") {
    if (actual === null || typeof actual !== "object") return [`${path}: expected an object, got ${String(actual)}`];
    const keys = new Set([...Object.keys(expected), ...Object.keys(actual)]);
    return [...keys].flatMap((k) =>
      recordDifferences((expected as Record<string, unknown>)[k], (actual as Record<string, unknown>)[k], `${path}.${k}`),
    );
  }
  return Object.is(expected, actual) ? [] : [`${path}: expected ${String(expected)}, got ${String(actual)}`];
}
