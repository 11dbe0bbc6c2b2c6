/** The in-process LLM proxy: public surface. */
export { ProxyServer, type ListenOn, type ProxyServerConfig, type ProxySession, type RequestEnd } from "./server.ts";
export { loadProxyModel, type ProxyModel, type ProxyModelOptions } from "./model.ts";
export { SessionCapture, type AuditEntry, type AuditReason, type RoutingCoverage, type SessionRecords, type TurnListener } from "./capture/session-capture.ts";
export { ChatTemplate, TemplateError } from "./chat-template.ts";
export { TextTokenizer, ModelFilesError } from "./tokenizer.ts";
export { CompletionParser, parseCompletion, parseToolCallBody, type CompletionEvent, type ParsedToolCall, type ToolCallFormat } from "./tool-calls.ts";
export type { ChatMessage, ChatRequest, ToolCall, ToolSpec } from "./chat.ts";
export {
  AuthenticationError,
  ClientGoneError,
  InvalidRequestError,
  NotFoundError,
  ProxyEngineError,
  ProxyError,
  RequestTooLargeError,
} from "./errors.ts";
export { proxyCommand } from "./cli.ts";
