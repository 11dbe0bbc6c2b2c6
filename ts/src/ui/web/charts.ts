/// <reference lib="dom" />
/** The curves: one uPlot line chart per metric, fed from the step log or the spooled batches. */
import { html } from "htm/preact";
import { useEffect, useRef } from "preact/hooks";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import type { RunSnapshot } from "./api.ts";

export interface ChartSpec {
  title: string;
  /** steps: x is the trainer step; batches: x is the batch's place in spool order. */
  source: "steps" | "batches";
  key: string;
}

export const CHARTS: ChartSpec[] = [
  { title: "reward (batch mean)", source: "batches", key: "reward/mean" },
  { title: "rollout/trainer prob correlation", source: "steps", key: "mismatch/pearson_prob" },
  { title: "k3 KL rollout vs trainer", source: "steps", key: "mismatch/k3_kl" },
  { title: "clip fraction", source: "steps", key: "loss/clip_frac" },
  { title: "response tokens", source: "batches", key: "episode/response_tokens" },
  { title: "turns per episode", source: "batches", key: "episode/turns" },
  { title: "tool calls per turn", source: "batches", key: "tools/calls_per_turn" },
  { title: "self-verification (re-reads per turn)", source: "batches", key: "behaviour/rereads_per_turn" },
  { title: "env_error rate", source: "batches", key: "episode/env_error_rate" },
  { title: "reward-hack flag rate", source: "batches", key: "reward/flag_rate" },
  { title: "throughput (tokens/s)", source: "steps", key: "throughput/tokens_per_s" },
  { title: "grad norm", source: "steps", key: "optim/grad_norm" },
];

export const chartId = (key: string) => `chart-${key.replace(/[^a-z0-9]+/gi, "-")}`;

type Run = Pick<RunSnapshot, "steps" | "batches">;

function series(run: Run, spec: ChartSpec): [number[], number[]] {
  const points = spec.source === "steps" ? run.steps.map((s) => [s.step, s.signal[spec.key]] as const) : run.batches.map((b) => [b.index, b.signal[spec.key]] as const);
  const kept = points.filter((p): p is readonly [number, number] => typeof p[1] === "number" && Number.isFinite(p[1]));
  return [kept.map((p) => p[0]), kept.map((p) => p[1])];
}

/** This run's points and, when comparing, the other run's, on one x axis (uPlot.join aligns them, gaps as null). */
function Chart({ spec, main, other }: { spec: ChartSpec; main: [number[], number[]]; other: [number[], number[]] | null }) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const data = (other === null ? main : uPlot.join([main, other])) as uPlot.AlignedData;
  useEffect(() => {
    const line = (label: string, stroke: string, dash?: number[]) => ({ label, stroke, width: 2, dash, spanGaps: true, points: { show: true, size: 5 } });
    plot.current = new uPlot({
      width: 340, height: 150, legend: { show: false }, scales: { x: { time: false } },
      series: [{ label: spec.source === "steps" ? "step" : "batch" }, line("this run", "#2266cc"), ...(other === null ? [] : [line("compared run", "#d9822b", [6, 4])])],
      axes: [{ size: 30 }, { size: 50 }],
    }, data, el.current!);
    return () => plot.current?.destroy();
  }, []);
  useEffect(() => { plot.current?.setData(data); }, [data]);
  return html`<figure class="chart" id=${chartId(spec.key)} data-points=${main[0].length} data-compare-points=${other === null ? undefined : other[0].length}>
    <figcaption>${spec.title} <code>${spec.key}</code>${main[0].length === 0 ? html` <em>no data yet</em>` : null}</figcaption>
    <div ref=${el}></div>
  </figure>`;
}

export function Charts({ snapshot }: { snapshot: RunSnapshot }) {
  const c = snapshot.compare;
  return html`${c === null ? null : html`<p id="compare-legend" class="legend"><span class="swatch main"></span> this run · <span class="swatch other"></span> compared: <code>${c.runDir}</code></p>`}
    <section class="charts">${CHARTS.map((spec) => html`<${Chart} key=${`${spec.key}:${c === null}`} spec=${spec} main=${series(snapshot, spec)} other=${c === null ? null : series(c, spec)} />`)}</section>`;
}
