/**
 * The neutral chat request every API adapter (OpenAI chat, Anthropic
 * messages, OpenAI responses) converts to, and the neutral reply it converts
 * back from. Only what the chat template and the engine need is kept.
 */

export type Role = "system" | "user" | "assistant" | "tool";

export interface ToolCall {
  /** The harness-visible id (OpenAI `call_…`, Anthropic `toolu_…`). */
  id: string;
  name: string;
  /** Arguments as JSON text, exactly as the client sent or the model produced. */
  arguments: string;
}

export interface ChatMessage {
  role: Role;
  content: string;
  /** Thinking text of an assistant turn (Anthropic thinking blocks, OpenAI reasoning_content). */
  reasoning?: string | null;
  tool_calls?: ToolCall[];
  /** For role "tool": the call this result answers. */
  tool_call_id?: string;
}

export interface ToolSpec {
  name: string;
  description?: string;
  /** JSON Schema of the arguments (type "object"). */
  parameters: Record<string, unknown>;
}

export type ToolChoice = "auto" | "none" | "required" | { name: string };

export interface ChatSampling {
  temperature?: number;
  top_p?: number;
  max_tokens?: number;
  seed?: number;
}

export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  /** The tools the prompt shows the model. */
  tools: ToolSpec[];
  /**
   * Tools declared but not shown (Anthropic `defer_loading`): a tool result brings one
   * into the conversation with a `tool_reference`, and the model may call it from then on.
   */
  deferred_tools?: ToolSpec[];
  tool_choice: ToolChoice;
  sampling: ChatSampling;
  stream: boolean;
  /** Passed to the template as `enable_thinking` when set (Qwen3). */
  enable_thinking?: boolean;
  /**
   * The last message is an assistant message the model continues (Anthropic prefill):
   * the prompt ends with its text, open, and the reply is only what follows it.
   */
  continue_final_message?: boolean;
}

/** What the model said, parsed from its completion. */
export interface AssistantReply {
  reasoning: string | null;
  content: string;
  tool_calls: ToolCall[];
}

/** How a reply ended, in API-neutral terms. */
export type ReplyStop = "end_turn" | "tool_calls" | "max_tokens";
