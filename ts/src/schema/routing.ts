import type { RoutingArray, RoutingDtype } from "./generated.ts";

export const META_SCHEMA_VERSION = "lego.schema_version";
export const META_RECORD = "lego.record";
export const META_LAYERS = "lego.routing.layers";
export const META_TOP_K = "lego.routing.top_k";
export const META_NUM_EXPERTS = "lego.routing.num_experts";

/** MoE routing layout shared by every routing column of one batch; null means a dense model. */
export interface RoutingShape {
  /** MoE layers that record routing. */
  readonly layers: number;
  /** Experts chosen per token per layer. */
  readonly top_k: number;
  /** Experts per layer; decides the storage type (uint8 up to 256, else uint16). */
  readonly num_experts: number;
}

export function checkRoutingShape(shape: RoutingShape): RoutingShape {
  const { layers, top_k, num_experts } = shape;
  for (const [name, value] of Object.entries(shape)) {
    if (!Number.isInteger(value) || value <= 0) {
      throw new RangeError(`routing shape ${name} must be a positive integer, got ${value}`);
    }
  }
  if (top_k > num_experts) throw new RangeError(`top_k ${top_k} exceeds num_experts ${num_experts}`);
  if (num_experts > 65536) throw new RangeError(`${num_experts} experts do not fit uint16 routing ids`);
  return { layers, top_k, num_experts };
}

export function routingDtype(shape: RoutingShape | null): RoutingDtype {
  return shape && shape.num_experts > 256 ? "uint16" : "uint8";
}

/** Routing values per token (layers * top_k). */
export function routingPerToken(shape: RoutingShape): number {
  return shape.layers * shape.top_k;
}

/** Allocates a zeroed routing buffer of the right element type for `tokens` tokens. */
export function allocRouting(shape: RoutingShape, tokens: number): RoutingArray {
  const size = tokens * routingPerToken(shape);
  return routingDtype(shape) === "uint8" ? new Uint8Array(size) : new Uint16Array(size);
}

export function routingMetadata(shape: RoutingShape): [string, string][] {
  return [
    [META_LAYERS, String(shape.layers)],
    [META_TOP_K, String(shape.top_k)],
    [META_NUM_EXPERTS, String(shape.num_experts)],
  ];
}

/** Reads the routing shape from Arrow metadata; null for a dense model (no routing keys). */
export function routingFromMetadata(metadata: Map<string, string>): RoutingShape | null {
  const keys = [META_LAYERS, META_TOP_K, META_NUM_EXPERTS];
  const present = keys.filter((k) => metadata.has(k));
  if (present.length === 0) return null;
  if (present.length < keys.length) {
    const missing = keys.filter((k) => !metadata.has(k));
    throw new RangeError(`routing metadata is incomplete: missing ${missing.join(", ")}`);
  }
  return checkRoutingShape({
    layers: Number(metadata.get(META_LAYERS)),
    top_k: Number(metadata.get(META_TOP_K)),
    num_experts: Number(metadata.get(META_NUM_EXPERTS)),
  });
}
