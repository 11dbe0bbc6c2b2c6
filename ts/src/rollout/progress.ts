/**
 * What a person at a terminal sees while the worker runs: two bars
 * (cli-progress), groups shipped and rollouts finished, with the rollouts in
 * flight, the mean reward so far and the failures by type. It reads only the
 * RolloutEvents stream, like every other consumer; `lego rollout` uses it
 * when stderr is a terminal (JSON lines otherwise, summary.ts).
 */
import { MultiBar, Presets, type SingleBar } from "cli-progress";
import type { RolloutEvents } from "./events.ts";

export interface ProgressTotals {
  groups: number;
  rollouts: number;
}

export class ProgressView {
  private readonly multi: MultiBar;
  private readonly groups: SingleBar;
  private readonly rollouts: SingleBar;
  private readonly failures: Record<string, number> = {};
  private inFlight = 0;
  private rewardSum = 0;
  private rewarded = 0;
  private readonly unsubscribe: () => void;

  constructor(events: RolloutEvents, totals: ProgressTotals, stream: NodeJS.WritableStream = process.stderr) {
    this.multi = new MultiBar({
      stream, hideCursor: true, clearOnComplete: false, fps: 5, barsize: 24,
      format: "{label} [{bar}] {value}/{total} | {info}",
    }, Presets.shades_classic);
    this.groups = this.multi.create(totals.groups, 0, { label: "groups  ", info: "" });
    this.rollouts = this.multi.create(totals.rollouts, 0, { label: "rollouts", info: "" });
    this.unsubscribe = events.subscribe((e) => {
      if (e.kind === "rollout_started") this.inFlight += 1;
      else if (e.kind === "rollout_retried") {
        this.inFlight -= 1;
        this.count(`env_error:${e.envError} (retried)`);
      } else if (e.kind === "rollout_finished") {
        this.inFlight -= 1;
        if (e.reward !== null) {
          this.rewardSum += e.reward;
          this.rewarded += 1;
        }
        if (e.status !== "ok") this.count(e.status === "env_error" ? `env_error:${e.envError?.split(":")[0] ?? "unknown"}` : e.status);
        this.rollouts.increment(1);
      } else if (e.kind === "over_length" && e.action === "dropped") this.count("over_length");
      else if (e.kind === "group_shipped") this.groups.increment(1);
      else return;
      this.update();
    });
  }

  private count(kind: string): void {
    this.failures[kind] = (this.failures[kind] ?? 0) + 1;
  }

  private update(): void {
    const reward = this.rewarded ? (this.rewardSum / this.rewarded).toFixed(3) : "-";
    const failures = Object.entries(this.failures).map(([k, n]) => `${k} ${n}`).join(", ") || "none";
    this.groups.update({ info: `reward so far ${reward}` });
    this.rollouts.update({ info: `in flight ${this.inFlight} | failures: ${failures}` });
  }

  /** Prints a line above the bars (a bare write would be drawn over). */
  log(text: string): void {
    this.multi.log(text.endsWith("\n") ? text : `${text}\n`);
    // cli-progress prints its log buffer on its next redraw; redraw now so the line is not held (or lost at stop).
    this.multi.update();
  }

  /** Draws the last frame and gives the terminal back (before the summary is printed). */
  stop(): void {
    this.unsubscribe();
    this.update();
    this.multi.update();
    this.multi.stop();
  }
}
