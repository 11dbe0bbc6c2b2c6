/** Command-line figures every role of the proxy benchmark reads (each role is its own process with the same argv). */
export const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
export const strArg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : dflt;
};
export const SESSIONS = arg("sessions", 64);
/**
 * Measured runs per path. Paths take turns, one run each per round, and each
 * path's samples are pooled over the rounds: a path's percentile minus the
 * direct one's then compares the same stretches of time instead of two
 * 10-second windows minutes apart, on a host whose speed drifts.
 */
export const ROUNDS = arg("rounds", 3);
export const TARGET_TOKENS = arg("target-tokens", 30_000);
/** Engine time per sampled token in the paced workload. */
export const DECODE_MS_PER_TOKEN = arg("decode-ms-per-token", 20);
/**
 * When the engine sends a streamed reply's chunks (the proxy's paths stream; the others get one
 * JSON reply at the end): "decode", each as its tokens are sampled, as vLLM and the Python engine
 * do; "end", all of them once the last token is (the bench before 2026-12-07). The last token
 * reaches every path at the same time either way.
 */
export const STREAM_PACING = ((v) => {
  if (v !== "decode" && v !== "end") throw new Error(`--stream-pacing must be decode or end, got ${JSON.stringify(v)}`);
  return v;
})(strArg("stream-pacing", "decode"));
/** Mean time the harness spends running a tool between two calls in the paced workload (uniform 0..2x). */
export const TOOL_MS = arg("tool-ms", 100);
/** ~4 characters per token for this generated text (measured with the Qwen3 tokenizer). */
export const CHARS_PER_TOKEN = 3.4;
export const REPLY_ARGS = { cmd: "cat src/app.ts", timeout: 30 };
export const REPLY_TEXT = `<tool_call>\n${JSON.stringify({ name: "run", arguments: REPLY_ARGS })}\n</tool_call>`;
