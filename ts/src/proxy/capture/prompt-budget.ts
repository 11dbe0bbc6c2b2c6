/**
 * Whether a prompt fits the engine's context window, decided while it is planned:
 * a prompt must leave room for one sampled token (`checkFits`), and a text far
 * longer than the room left is refused from its first slices (`probeFits`)
 * rather than tokenized to the end.
 */
import { PromptTooLongError } from "../errors.ts";
import { Growable } from "../growable.ts";
import type { PromptCodec } from "./thread-capture.ts";

/** A prompt of `n` tokens must leave room for one sampled token. */
export function checkFits(n: number, window: number | null): void {
  if (window !== null && n >= window) throw new PromptTooLongError(n, window);
}

/**
 * Text longer than this many chars per token of room is probed first: it is tokenized
 * a slice at a time, and once the slices alone overflow the room, the prompt is refused
 * without tokenizing the rest (a 20 MB tool result is millions of tokens: seconds of
 * CPU on the event loop every session shares). Prose and code run 2-4 chars per token.
 */
const PROBE_CHARS_PER_TOKEN = 8;
/** Tokens a slice cut mid-piece may have beyond its share of the whole text's. */
const PROBE_SLACK = 16;
const PROBE = new Growable(Int32Array, 1 << 14);

/** Refuses `text` early when its first slices show it cannot fit the tokens left in the window after `before`. */
export function probeFits(text: string, before: number, window: number | null, codec: PromptCodec): void {
  if (window === null) return;
  const room = Math.max(0, window - 1 - before);
  const limit = PROBE_CHARS_PER_TOKEN * room + PROBE_SLACK;
  if (text.length <= limit) return;
  // Slices of 2x the room in chars: text at 2+ chars per token overflows in the first slice or two.
  const slice = Math.max(2 * room, 1024);
  let counted = 0;
  let slices = 0;
  for (let at = 0; at < limit; ) {
    let to = Math.min(at + slice, limit);
    // Never between the two halves of a surrogate pair.
    if (isHighSurrogate(text.charCodeAt(to - 1))) to--;
    PROBE.truncate(0);
    codec.tokenizer.encodeInto(text.slice(at, to), PROBE);
    counted += PROBE.length;
    slices++;
    if (counted > room + slices * PROBE_SLACK) throw new PromptTooLongError(before + Math.round((counted * text.length) / to), window, true);
    at = to;
  }
}

function isHighSurrogate(unit: number): boolean {
  return unit >= 0xd800 && unit <= 0xdbff;
}
