/**
 * Token ids back to text for the trajectory view, with the proxy's own tokenizer and tool-call
 * parser (ts/src/proxy), so the UI reads a completion exactly as the proxy parsed it for the
 * harness: reasoning, content and tool calls.
 */
import { parseCompletion, TextTokenizer, type ToolCallFormat } from "../proxy/index.ts";

export interface TurnMessage {
  reasoning: string | null;
  content: string;
  toolCalls: { name: string; arguments: string }[];
}

export class TokenText {
  constructor(private readonly tokenizer: TextTokenizer, private readonly format: ToolCallFormat) {}

  /** `modelDir` holds tokenizer.json and tokenizer_config.json, as for `lego proxy --model-dir`. */
  static fromModelDir(modelDir: string, format: ToolCallFormat = "qwen3_json"): TokenText {
    return new TokenText(TextTokenizer.fromModelDir(modelDir), format);
  }

  decode(ids: readonly number[]): string {
    return this.tokenizer.decode(ids);
  }

  /** One string per token; a multi-byte character split over tokens shows as replacement marks on its pieces. */
  pieces(ids: readonly number[]): string[] {
    return ids.map((id) => this.tokenizer.decode([id]));
  }

  message(completion: string): TurnMessage {
    // The parser tolerates tools it was not told about in the JSON format; the XML format reads argument types from tools, so they stay strings.
    const m = parseCompletion(completion, this.format, []);
    return { reasoning: m.reasoning, content: m.content, toolCalls: m.calls.map((c) => ({ name: c.name, arguments: c.arguments })) };
  }
}
