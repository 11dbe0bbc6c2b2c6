/**
 * Everything the proxy needs to know about the served model: tokenizer, chat
 * template, end-of-turn and stop tokens, and which tool-call form it writes.
 */
import { ChatTemplate } from "./chat-template.ts";
import type { PromptCodec } from "./capture/thread-capture.ts";
import { ModelFilesError, TextTokenizer } from "./tokenizer.ts";
import type { ToolCallFormat } from "./tool-calls.ts";

export interface ProxyModelOptions {
  /** Tool-call form in the model's completions (read its chat template). */
  toolCallFormat?: ToolCallFormat;
  /** Extra stop tokens besides eos (Qwen3 also stops on <|endoftext|>). */
  extraStopTokens?: string[];
  /** Widen V8's inline caches for the chat template's interpreter (default true; see chat-template.ts). */
  tuneV8?: boolean;
}

export interface ProxyModel {
  modelDir: string;
  tokenizer: TextTokenizer;
  template: ChatTemplate;
  codec: PromptCodec & { stopTokenIds: number[] };
  toolCallFormat: ToolCallFormat;
  /** The context length tokenizer_config.json states; the proxy's window when the engine reports none. */
  contextWindow: number | null;
}

export function loadProxyModel(modelDir: string, options: ProxyModelOptions = {}): ProxyModel {
  const tokenizer = TextTokenizer.fromModelDir(modelDir);
  const eos = tokenizer.config.eos_token;
  if (eos === null) throw new ModelFilesError(modelDir, "tokenizer_config.json names no eos_token (the end-of-turn token)");
  const template = new ChatTemplate(tokenizer.config.chat_template, tokenizer.config, { tuneV8: options.tuneV8 ?? true });
  const endOfTurnId = tokenizer.requireTokenId(eos);
  const extra = (options.extraStopTokens ?? ["<|endoftext|>"]).map((t) => tokenizer.tokenId(t)).filter((id): id is number => id !== undefined);
  return {
    modelDir,
    tokenizer,
    template,
    codec: { tokenizer, template, endOfTurnId, endOfTurnText: eos, stopTokenIds: [endOfTurnId, ...extra.filter((id) => id !== endOfTurnId)] },
    toolCallFormat: options.toolCallFormat ?? "qwen3_json",
    contextWindow: tokenizer.config.model_max_length,
  };
}
