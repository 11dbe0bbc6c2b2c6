/**
 * Parsing request bodies whose history only grows.
 *
 * An agent harness re-sends its whole conversation on every call: call n+1's
 * body is call n's body with a few messages appended to one array (OpenAI and
 * Anthropic `messages`, Responses `input`), and clients serialise the unchanged
 * messages to the same bytes. Parsing that echo again was the largest single
 * cost of a call on agent-sized histories, and its strings were garbage at once.
 *
 * So each session keeps its previous body. When a new body starts with the
 * same bytes up to the end of the previous array's last element, only the rest
 * is parsed (the object's head, the new elements, the fields after the array),
 * and the array is the previous elements, the very same objects, followed by
 * the new ones. That is exactly what JSON.parse of the whole body returns:
 * equal bytes parse to equal values, and the text parsed instead is valid JSON
 * exactly when the whole body is (the case where it is not, a trailing comma
 * after the old elements, is checked).
 *
 * Some clients rewrite their newest messages as well: Claude Code moves its
 * cache breakpoint (`cache_control`) to the newest message every call, so the
 * previous newest message comes back without it. Then the longest run of
 * previous elements the body repeats byte for byte (through the comma after
 * them) is reused, and parsing starts at the first element that differs.
 * Anything else (an edit before the array's first comma, the array's key twice,
 * a key spelled with escapes) is parsed whole.
 *
 * The fields after the array (the tool list, often tens of KB, and the
 * sampling settings) usually repeat too: when the bytes from the array's `]` to
 * the end equal the previous body's, their values are the previous ones, the
 * same objects, so a tool list is neither parsed again nor a new object each
 * call. The fields before the array always repeat when any element is reused
 * (the bytes compared start at the body's first byte), so their values are the
 * previous ones too: an Anthropic body's `system` blocks and `tools` (~20 KB of
 * a Claude-Code-shaped body, which puts them first) are parsed once per session,
 * and the API parser's per-value caches then hit. Values are shared between
 * results: callers must not mutate them.
 *
 * No JSON library offers resuming a parse at a byte offset; the scanner below
 * only finds the array's brackets and the object's top-level keys, and skips
 * strings with Buffer.indexOf.
 */

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;

interface Previous {
  /** Offset just past the array's `[`. */
  open: number;
  /** Offset just past the array's last element (whitespace before its `]` may differ next time, as pretty-printers put it). */
  end: number;
  elements: unknown[];
  /** Offsets of the commas between the array's elements, in order (`elements.length - 1` of them). */
  commas: number[];
}

export class GrowingBodyParser {
  private previous: Previous | null = null;
  /**
   * The previous body's bytes up to `previous.end`, in a buffer this parser
   * owns and reuses. Keeping the request's own buffer instead would hand V8 a
   * new off-heap block per call that lives just long enough to reach the old
   * generation; that churn is what started its full collections.
   */
  private kept = Buffer.alloc(0);
  /** The previous body from its array's `]` to its end, and the fields that text holds, parsed. */
  private tail = Buffer.alloc(0);
  private tailLength = -1;
  private tailFields: Array<[string, unknown]> = [];
  /** The previous body's fields before the array, in order (its bytes up to `previous.open` are what they were parsed from). */
  private headFields: Array<[string, unknown]> = [];
  private readonly key: Buffer;
  /** Bytes of the last body that were not parsed again (0 when it was parsed whole). */
  lastReusedBytes = 0;

  /** `arrayKey`: the top-level field that holds the growing history. */
  constructor(readonly arrayKey: string) {
    this.key = Buffer.from(arrayKey, "utf8");
  }

  /** The body's JSON value; throws JSON.parse's SyntaxError for text that is not JSON. */
  parse(bytes: Buffer): unknown {
    const reused = this.parseAfterPrevious(bytes);
    if (reused !== undefined) return reused;
    this.lastReusedBytes = 0;
    this.previous = null;
    const value: unknown = JSON.parse(bytes.toString("utf8"));
    const elements = arrayOf(value, this.arrayKey);
    if (elements && elements.length > 0) {
      const commas: number[] = [];
      const layout = walk(bytes, 0, 0, -1, this.key, commas);
      if (layout) {
        // The head's fields from its own text (in `value` a key the tail repeats has the tail's value), and the
        // tail's: the body is JSON, so both parse. The next body that repeats them gets these very objects.
        const head = JSON.parse(bytes.toString("utf8", 0, layout.open) + "]}") as Record<string, unknown>;
        this.headFields = Object.entries(head).filter(([k]) => k !== this.arrayKey);
        for (const [k, v] of this.headFields) defineField(value as Record<string, unknown>, k, v);
        const fields = this.fieldsAfter(bytes, layout.close);
        if (fields) for (const [k, v] of fields) defineField(value as Record<string, unknown>, k, v);
        this.remember(bytes, 0, { open: layout.open, end: lastElementEnd(bytes, layout.close), elements, commas });
      }
    }
    return value;
  }

  private parseAfterPrevious(bytes: Buffer): unknown {
    const prev = this.previous;
    if (!prev) return undefined;
    if (bytes.length <= prev.end || bytes.compare(this.kept, 0, prev.end, 0, prev.end) !== 0) return this.parseAfterRepeatedElements(bytes, prev);
    const after = skipWhitespace(bytes, prev.end);
    let rest: number;
    if (bytes[after] === CLOSE_BRACKET) rest = after;
    else if (bytes[after] === COMMA) {
      rest = after + 1;
      // `[old, ]` is not JSON, but `[` + ` ]` would be.
      if (bytes[skipWhitespace(bytes, rest)] === CLOSE_BRACKET) return undefined;
    } else return undefined;
    return this.parseRest(bytes, prev, after, rest, prev.elements.length, prev.end);
  }

  /**
   * The body when it repeats the previous one's bytes through the comma after one
   * of its elements but not to the end of the last: the elements up to the last
   * such comma are reused, the rest parsed. Undefined when no comma is repeated.
   */
  private parseAfterRepeatedElements(bytes: Buffer, prev: Previous): unknown {
    // Repeating the bytes through comma j implies repeating them through every earlier comma: search for the last.
    let reused = -1;
    for (let lo = 0, hi = prev.commas.length - 1; lo <= hi; ) {
      const mid = (lo + hi) >> 1;
      const n = prev.commas[mid]! + 1;
      if (bytes.length > n && bytes.compare(this.kept, 0, n, 0, n) === 0) {
        reused = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    if (reused < 0) return undefined;
    const rest = prev.commas[reused]! + 1;
    // `[old, ]` is not JSON, but `[` + ` ]` would be.
    if (bytes[skipWhitespace(bytes, rest)] === CLOSE_BRACKET) return undefined;
    return this.parseRest(bytes, prev, rest, rest, reused + 1, rest);
  }

  /**
   * The body whose head and first `reused` history elements are the previous body's
   * bytes (its first `same` bytes are): the elements from `rest` to the array's `]`
   * and the fields after it are parsed, the reused ones are the previous objects.
   * The walk for the array's end starts at `from` (`rest`, or the separator before it).
   * Undefined when the text is not what JSON.parse of the whole body would accept.
   */
  private parseRest(bytes: Buffer, prev: Previous, from: number, rest: number, reused: number, same: number): unknown {
    const commas: number[] = [];
    const layout = walk(bytes, from, 2, prev.open, this.key, commas);
    // The walk ends the array at any closing bracket; the text parsed below has its own `]`, so a `}` there must be refused here.
    if (!layout || bytes[layout.close] !== CLOSE_BRACKET) return undefined;
    const fields = this.fieldsAfter(bytes, layout.close);
    if (!fields) return undefined; // parsed whole, for JSON.parse's own message and position
    let added: unknown[];
    try {
      // The new elements; the text before them is the previous body's (headFields), the fields after them are `fields`.
      added = JSON.parse("[" + bytes.toString("utf8", rest, layout.close) + "]") as unknown[];
    } catch {
      return undefined;
    }
    const record: Record<string, unknown> = {};
    for (const [k, v] of this.headFields) defineField(record, k, v);
    const elements = prev.elements.slice(0, reused).concat(added);
    defineField(record, this.arrayKey, elements);
    for (const [k, v] of fields) defineField(record, k, v);
    // The previous body's commas among and after the reused elements, then the ones the walk passed.
    this.remember(bytes, same, { open: prev.open, end: lastElementEnd(bytes, layout.close), elements, commas: prev.commas.slice(0, reused).concat(commas) });
    this.lastReusedBytes = same;
    return record;
  }

  /**
   * The top-level fields after the array whose `]` is at `close`, in order: the
   * previous ones when the bytes from `close` to the end are the previous body's,
   * else parsed. Null when that text is not the end of a JSON object.
   */
  private fieldsAfter(bytes: Buffer, close: number): Array<[string, unknown]> | null {
    const n = bytes.length - close;
    if (n === this.tailLength && bytes.compare(this.tail, 0, n, close, bytes.length) === 0) return this.tailFields;
    const next = skipWhitespace(bytes, close + 1);
    let fields: Array<[string, unknown]>;
    if (bytes[next] === CLOSE_BRACE) {
      // Only whitespace may follow the object.
      if (skipWhitespace(bytes, next + 1) !== bytes.length) return null;
      fields = [];
    } else if (bytes[next] === COMMA) {
      // `[…], }` is not JSON, but `{` + ` }` would be.
      if (bytes[skipWhitespace(bytes, next + 1)] === CLOSE_BRACE) return null;
      let parsed: unknown;
      try {
        parsed = JSON.parse("{" + bytes.toString("utf8", next + 1));
      } catch {
        return null;
      }
      fields = Object.entries(parsed as Record<string, unknown>);
    } else return null;
    if (n > this.tail.length) this.tail = Buffer.allocUnsafe(Math.max(n, 2 * this.tail.length));
    bytes.copy(this.tail, 0, close);
    this.tailLength = n;
    this.tailFields = fields;
    return fields;
  }

  /** Keeps `bytes` up to `next.end`; the first `same` bytes are already kept. */
  private remember(bytes: Buffer, same: number, next: Previous): void {
    if (next.end > this.kept.length) {
      const bigger = Buffer.allocUnsafe(Math.max(next.end, 2 * this.kept.length));
      this.kept.copy(bigger, 0, 0, same);
      this.kept = bigger;
    }
    bytes.copy(this.kept, same, same, next.end);
    this.previous = next;
  }
}

/**
 * Sets `key` as JSON.parse does: an own data property, in place when it is already
 * there (a key twice keeps its first position and its last value), and
 * "__proto__" as a plain key rather than the prototype.
 */
function defineField(target: Record<string, unknown>, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, writable: true, enumerable: true, configurable: true });
}

function arrayOf(value: unknown, key: string): unknown[] | null {
  if (!value || typeof value !== "object" || Array.isArray(value)) return null;
  const a = (value as Record<string, unknown>)[key];
  return Array.isArray(a) ? a : null;
}

/** Offset just past the last non-whitespace byte before the `]` at `close`. */
function lastElementEnd(b: Buffer, close: number): number {
  let i = close;
  while (isWhitespace(b[i - 1])) i--;
  return i;
}

function skipWhitespace(b: Buffer, i: number): number {
  while (i < b.length && isWhitespace(b[i])) i++;
  return i;
}

/** JSON's insignificant whitespace: space, line feed, carriage return, tab. */
function isWhitespace(byte: number | undefined): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}

/** Offset just past the string whose opening quote is at `at`; -1 when it does not end. */
function stringEnd(b: Buffer, at: number): number {
  let q = at;
  for (;;) {
    q = b.indexOf(QUOTE, q + 1);
    if (q < 0) return -1;
    let k = q - 1;
    while (b[k] === BACKSLASH) k--;
    if ((q - 1 - k) % 2 === 0) return q + 1;
  }
}

/**
 * Walks JSON text from `i` with `depth` containers open (0: before the value;
 * 2: inside the array of `key`, whose `[` ends at `open`) and returns where
 * that array's elements start and where its `]` is; the commas between the
 * array's elements that it passes are pushed to `commas`. Null unless the text is an
 * object with `key` exactly once among its own keys, holding an array, and no
 * key of the object is written with escapes (it could spell `key`). The walk
 * does not validate: the caller parses the text with JSON.parse.
 */
function walk(b: Buffer, i: number, depth: number, open: number, key: Buffer, commas: number[]): { open: number; close: number } | null {
  let inArray = depth === 2;
  let close = -1;
  const n = b.length;
  if (depth === 0) {
    i = skipWhitespace(b, i);
    if (b[i] !== OPEN_BRACE) return null;
    depth = 1;
    i++;
  }
  while (i < n) {
    const c = b[i]!;
    if (c === QUOTE) {
      const end = stringEnd(b, i);
      if (end < 0) return null;
      if (depth === 1 && b[skipWhitespace(b, end)] === COLON) {
        for (let k = i + 1; k < end - 1; k++) if (b[k] === BACKSLASH) return null;
        if (end - i - 2 === key.length && b.compare(key, 0, key.length, i + 1, end - 1) === 0) {
          if (open >= 0) return null; // the key twice: JSON.parse keeps the last one
          const v = skipWhitespace(b, skipWhitespace(b, end) + 1);
          if (b[v] !== OPEN_BRACKET) return null;
          open = v + 1;
          inArray = true;
          depth = 2;
          i = open;
          continue;
        }
      }
      i = end;
      continue;
    }
    if (c === OPEN_BRACE || c === OPEN_BRACKET) depth++;
    else if (c === COMMA && depth === 2 && inArray) commas.push(i);
    else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      depth--;
      if (depth === 1 && inArray) {
        inArray = false;
        close = i;
      } else if (depth === 0) return open >= 0 && close >= 0 ? { open, close } : null;
    }
    i++;
  }
  return null;
}
