/**
 * Comparing the history a harness sends with what the proxy recorded.
 *
 * Harnesses re-serialize what they echo back (DESIGN.md "Facts from the
 * field"): Claude Code re-serializes tool arguments and can rename tools;
 * clients strip or add whitespace. A fingerprint keeps what identifies a
 * message and drops what re-serialization changes: whitespace runs collapse,
 * JSON arguments compare as canonical JSON, assistant tool calls compare by id
 * and arguments but not by name, and reasoning is ignored (harnesses drop or
 * redact thinking; the template drops it too).
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

export function messageFingerprint(m: ChatMessage): string {
  switch (m.role) {
    case "assistant": {
      const calls = (m.tool_calls ?? []).map((c) => `${c.id}\u0002${canonicalJson(c.arguments)}`).join("\u0003");
      return `a\u0000${normText(m.content)}\u0000${calls}`;
    }
    case "tool":
      return `t\u0000${m.tool_call_id ?? ""}\u0000${normText(m.content)}`;
    default:
      return `${m.role[0]}\u0000${normText(m.content)}`;
  }
}
