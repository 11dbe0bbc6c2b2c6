import { describe, expect, it } from "vitest";
import { RolloutEvents, type RolloutEvent } from "./index.ts";

describe("RolloutEvents", () => {
  it("delivers stamped events in order to every subscriber until it unsubscribes", () => {
    const events = new RolloutEvents(() => 42);
    const a: (RolloutEvent & { at: number })[] = [];
    const b: string[] = [];
    const offA = events.subscribe((e) => a.push(e));
    events.subscribe((e) => b.push(e.kind));
    events.emit({ kind: "rollout_started", groupId: "g", trajectoryId: "t", taskId: "x", attempt: 0 });
    offA();
    events.emit({ kind: "group_shipped", groupId: "g", taskId: "x", trajectories: 4, droppedEnvErrors: 0 });
    expect(a).toEqual([{ kind: "rollout_started", groupId: "g", trajectoryId: "t", taskId: "x", attempt: 0, at: 42 }]);
    expect(b).toEqual(["rollout_started", "group_shipped"]);
  });

  it("a throwing subscriber is recorded and does not stop the others", () => {
    const events = new RolloutEvents();
    const seen: string[] = [];
    events.subscribe(() => {
      throw new Error("sink down");
    });
    events.subscribe((e) => seen.push(e.kind));
    events.emit({ kind: "resumed", policyVersion: 3, trainerVersion: 4 });
    expect(seen).toEqual(["resumed"]);
    expect(events.listenerErrors).toHaveLength(1);
  });
});
