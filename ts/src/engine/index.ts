export type { EngineClient, EngineRejection, GenerateChunk, GenerateRequest, SamplingParams } from "./types.ts";
export { EngineAbortedError, EngineError, EngineUnavailableError, isEngineRejection } from "./types.ts";
export { ScriptedEngine, fakeLogprob, type ScriptedCall, type ScriptedEngineConfig, type ScriptedReply } from "./scripted.ts";
export { VllmEngine, type VllmEngineConfig } from "./vllm.ts";
export { SglangEngine, type SglangEngineConfig } from "./sglang.ts";
export { FrameReader, frameBytes, isControlAddress } from "./wire.ts";
export { ZmqEngine, ZMQ_ENGINE_DEFAULTS, EngineRequestError, isEngineRequestError, type ZmqEngineConfig } from "./zmq.ts";
export { AffinityEngine, AFFINITY_DEFAULTS, NoReplicaError, proxyTurnSession, type AffinityConfig, type RoutedEngine } from "./affinity.ts";
