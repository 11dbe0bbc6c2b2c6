/**
 * Comparing an assistant message a harness echoes back with the reply the proxy
 * recorded.
 *
 * Harnesses re-serialize what the model wrote: Claude Code re-serializes
 * tool arguments and can rename tools;
 * clients strip or add whitespace around the text. A fingerprint keeps what
 * identifies the reply and drops what re-serialization changes: whitespace runs
 * collapse, JSON arguments compare as canonical JSON, tool calls compare by id
 * and arguments but not by name, and reasoning is ignored (harnesses drop or
 * redact thinking; the template drops it too). The tokens the model saw are the
 * recorded ones either way. Messages the harness writes itself (user, tool,
 * system) are not fingerprinted: any change to them, whitespace included, is a
 * change to the prompt (thread-capture.ts `sameMessage`).
 */
import type { ChatMessage } from "../chat.ts";

function normText(s: string): string {
  return s.replace(/\s+/g, " ").trim();
}

/** JSON text with sorted keys and no insignificant whitespace; non-JSON text is whitespace-normalised. */
export function canonicalJson(text: string): string {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return "\u0001" + normText(text);
  }
  return JSON.stringify(sortKeys(v));
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v && typeof v === "object") {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(v).sort()) out[k] = sortKeys((v as Record<string, unknown>)[k]);
    return out;
  }
  return v;
}

/** What identifies an assistant reply across re-serialization. */
export function assistantFingerprint(m: ChatMessage): string {
  const calls = (m.tool_calls ?? []).map((c) => `${c.id}\u0002${canonicalJson(c.arguments)}`).join("\u0003");
  return `${normText(m.content)}\u0000${calls}`;
}
