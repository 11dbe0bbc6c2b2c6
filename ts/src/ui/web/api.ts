/// <reference lib="dom" />
/**
 * The page's side of the server's API: the run snapshot arrives over SSE (first frame at once,
 * then one per change of the run folder); a trajectory is fetched when opened.
 * Types come from the server's snapshot module, so both sides share one definition.
 */
import type { RunSnapshot, TrajectoryView } from "../snapshot.ts";

export type { RunSnapshot, TrajectoryView };
export type { TokenRun, TrajectorySummary, TurnView } from "../snapshot.ts";

const token = new URLSearchParams(location.search).get("token");
const withToken = (path: string) => (token === null ? path : `${path}${path.includes("?") ? "&" : "?"}token=${encodeURIComponent(token)}`);

export interface RunStream {
  onSnapshot(s: RunSnapshot): void;
  onRunError(message: string): void;
  onConnection(live: boolean): void;
}

export function subscribe(stream: RunStream): () => void {
  const source = new EventSource(withToken("/api/events"));
  source.addEventListener("open", () => stream.onConnection(true));
  source.addEventListener("error", () => stream.onConnection(false));
  source.addEventListener("snapshot", (e) => stream.onSnapshot(JSON.parse((e as MessageEvent<string>).data) as RunSnapshot));
  source.addEventListener("run-error", (e) => stream.onRunError((JSON.parse((e as MessageEvent<string>).data) as { message: string }).message));
  return () => source.close();
}

export async function fetchTrajectory(id: string): Promise<TrajectoryView> {
  const r = await fetch(withToken(`/api/trajectory?id=${encodeURIComponent(id)}`));
  // Error answers are { error } with a non-2xx status; a TrajectoryView has its own `error` field.
  if (!r.ok) throw new Error(((await r.json()) as { error: string }).error ?? `HTTP ${r.status}`);
  return (await r.json()) as TrajectoryView;
}
