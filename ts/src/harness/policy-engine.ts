/**
 * A real policy behind harness sessions: `--engine tcp://HOST:PORT` (or
 * ipc://PATH) names the embedded Python engine (`python -m lego_rl.engine`,
 * the address its "listening" line prints, as `lego check --engine-address`).
 *
 * One ZeroMQ connection serves every rollout of a launcher (the engine batches
 * their requests; a connection per rollout would only add sockets). The proxy
 * speaks the engine's model through `--model-dir` (its tokenizer and chat
 * template: the directory the engine was started with); EngineInfo does not name
 * a directory, so it cannot be derived, only checked (vocabulary size).
 *
 * Sampling is the trainer's business, not the harness's: every turn samples at
 * the configured temperature (1 by default) with top_p 1, whatever the harness
 * asked for, so the behaviour logprobs are the policy's own; the harness's
 * max_tokens is honoured only up to `maxTokensPerTurn`.
 */
import { isControlAddress, ZmqEngine, type EngineClient, type GenerateChunk, type GenerateRequest } from "../engine/index.ts";
import type { EngineInfo, RoutingShape } from "../schema/index.ts";
import type { ProxyModel } from "../proxy/index.ts";

export interface PolicySampling {
  /** Sampling temperature of every turn (the trainer's TIS/MIS assume the policy's own distribution at 1). */
  temperature: number;
  /** Completion tokens per turn at most (the engine's context window bounds it further). */
  maxTokensPerTurn: number;
}

export const DEFAULT_POLICY_SAMPLING: PolicySampling = { temperature: 1, maxTokensPerTurn: 2048 };

export interface PolicyEngineConfig {
  /** tcp://HOST:PORT, ipc://PATH or unix:///PATH of `python -m lego_rl.engine`. */
  address: string;
  sampling: PolicySampling;
  /** How long the engine may take to answer its first hello. */
  helloTimeoutMs: number;
}

export class PolicyEngineError extends Error {
  override name = "PolicyEngineError";
}

/** Whether `--engine` names an engine address rather than a scripted engine. */
export function isEngineAddress(engine: string): boolean {
  return isControlAddress(engine);
}

/** The connection to the real engine: a client that applies the sampling policy, and what the engine reported. */
export class PolicyEngine implements EngineClient {
  readonly name = "zmq";
  private version: number;
  private refreshing: Promise<void> | null = null;
  private lastRefresh = 0;

  private constructor(
    private readonly inner: ZmqEngine,
    readonly info: EngineInfo,
    private readonly sampling: PolicySampling,
  ) {
    this.version = info.policy_version;
  }

  static async connect(config: PolicyEngineConfig, model: ProxyModel): Promise<PolicyEngine> {
    const s = config.sampling;
    if (!(s.temperature > 0)) throw new PolicyEngineError(`sampling temperature must be > 0 for RL rollouts, got ${s.temperature}`);
    if (!Number.isInteger(s.maxTokensPerTurn) || s.maxTokensPerTurn < 1) throw new PolicyEngineError(`max tokens per turn must be a positive integer, got ${s.maxTokensPerTurn}`);
    const inner = new ZmqEngine({ address: config.address, clientId: "lego-harness", helloTimeoutMs: config.helloTimeoutMs });
    let info: EngineInfo;
    try {
      // contextWindow() waits for the first EngineInfo (bounded by helloTimeoutMs); engineInfo() then is its twin.
      await inner.contextWindow();
      info = await inner.engineInfo();
    } catch (e) {
      await inner.close();
      throw new PolicyEngineError(`--engine ${config.address}: ${(e as Error).message}`, { cause: e });
    }
    if (info.vocab_size < model.tokenizer.size) {
      await inner.close();
      throw new PolicyEngineError(
        `--engine ${config.address} serves ${info.model} with ${info.vocab_size} token ids, but --model-dir ${model.modelDir} has a ${model.tokenizer.size}-token tokenizer: point both at the same model`);
    }
    return new PolicyEngine(inner, info, s);
  }

  /** The routing shape of every segment this engine's turns fill (null for a dense model). */
  get routing(): RoutingShape | null {
    return this.info.moe_layers * this.info.top_k === 0 ? null : { layers: this.info.moe_layers, top_k: this.info.top_k, num_experts: this.info.num_experts };
  }

  /**
   * The weight version new turns sample with: the newest the engine has reported, from its
   * chunks and from EngineInfo, asked again at most every 200 ms (a trainer's weight push
   * reaches the engine on its own socket, so an idle worker would not see it otherwise).
   */
  samplingVersion(): number {
    const now = Date.now();
    if (!this.refreshing && now - this.lastRefresh >= 200) {
      this.lastRefresh = now;
      this.refreshing = this.inner.engineInfo()
        .then((info) => this.seen(info.policy_version))
        .catch(() => undefined) // a dropped connection shows up in the next turn; the cached version stands until then
        .finally(() => (this.refreshing = null));
    }
    return this.version;
  }

  async *generate(req: GenerateRequest, signal?: AbortSignal): AsyncIterable<GenerateChunk> {
    const sampling = { ...req.sampling, temperature: this.sampling.temperature, top_p: 1, max_tokens: Math.min(req.sampling.max_tokens, this.sampling.maxTokensPerTurn) };
    for await (const chunk of this.inner.generate({ ...req, sampling }, signal)) {
      this.seen(chunk.policy_version);
      yield chunk;
    }
  }

  async contextWindow(): Promise<number> {
    return this.info.max_context;
  }

  async close(): Promise<void> {
    // Closing first fails a version ask still waiting on a gone engine, so close never hangs on it.
    await this.inner.close();
    await this.refreshing;
  }

  private seen(version: number): void {
    if (version > this.version) this.version = version;
  }
}
