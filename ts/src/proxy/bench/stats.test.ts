import { describe, expect, it } from "vitest";
import { directSegments, pairedAdded, pct, proxySegments, segmentMedians } from "./stats.ts";

describe("the proxy bench's statistics", () => {
  it("pair each request with the direct call of the same key and keep negative differences", () => {
    const direct = new Map([["0/0", 10], ["0/1", 12], ["1/0", 9]]);
    const path = new Map([["0/0", 11.5], ["0/1", 11], ["2/0", 50]]);
    expect(pairedAdded(path, direct)).toEqual([1.5, -1]);
    expect(pct([3, 1, 2, 4], 50)).toBe(3);
  });

  it("cut a direct request into its hop to the engine, the body read there, and the reply's way back", () => {
    expect(directSegments({ start: 1000, end: 1480 }, { in: 1000.5, read: 1000.7, out: 1479.4 })).toEqual({
      to_handler: expect.closeTo(0.5, 9),
      body: expect.closeTo(0.2, 9),
      reply_to_client: expect.closeTo(0.6, 9),
    });
  });

  it("cut a proxied request into the proxy's phases and both hops, which with the engine's decode add up to the client's latency", () => {
    const d = { start: 1000, end: 1484 };
    // The response's 'finish' may come after the client has the reply: no segment ends there.
    const p = { start: 1000.5, body_ms: 0.2, plan_ms: 0.6, call: 1001.4, last: 1482.9, end: 1484.3 };
    const e = { in: 1001.6, read: 1001.7, out: 1482.5 };
    const segs = proxySegments(d, p, e);
    expect(Object.keys(segs)).toEqual(["to_handler", "body", "plan", "to_engine", "engine_to_proxy", "reply_to_client"]);
    expect(segs["to_engine"]).toBeCloseTo(0.4, 9);
    expect(segs["engine_to_proxy"]).toBeCloseTo(0.4, 9);
    expect(segs["reply_to_client"]).toBeCloseTo(1.1, 9);
    const outside = Object.values(segs).reduce((a, b) => a + b, 0);
    expect(outside + (e.out - e.read)).toBeCloseTo(d.end - d.start, 9);
  });

  it("take each segment's median over requests, in the path's order", () => {
    const rows = [
      { to_handler: 1, body: 5 },
      { to_handler: 3, body: 1 },
      { to_handler: 2, body: 2 },
    ];
    expect(segmentMedians(rows)).toEqual({ to_handler: 2, body: 2 });
    expect(segmentMedians([])).toEqual({});
  });
});
