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

function series(snapshot: RunSnapshot, spec: ChartSpec): [number[], number[]] {
  const points = spec.source === "steps" ? snapshot.steps.map((s) => [s.step, s.signal[spec.key]] as const) : snapshot.batches.map((b) => [b.index, b.signal[spec.key]] as const);
  const kept = points.filter((p): p is readonly [number, number] => typeof p[1] === "number" && Number.isFinite(p[1]));
  return [kept.map((p) => p[0]), kept.map((p) => p[1])];
}

function Chart({ spec, data }: { spec: ChartSpec; data: [number[], number[]] }) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  useEffect(() => {
    plot.current = new uPlot({
      width: 340, height: 150, legend: { show: false }, scales: { x: { time: false } },
      series: [{ label: spec.source === "steps" ? "step" : "batch" }, { label: spec.key, stroke: "#2266cc", width: 2, points: { show: true, size: 5 } }],
      axes: [{ size: 30 }, { size: 50 }],
    }, data, el.current!);
    return () => plot.current?.destroy();
  }, []);
  useEffect(() => { plot.current?.setData(data); }, [data]);
  return html`<figure class="chart" id=${chartId(spec.key)} data-points=${data[0].length}>
    <figcaption>${spec.title} <code>${spec.key}</code>${data[0].length === 0 ? html` <em>no data yet</em>` : null}</figcaption>
    <div ref=${el}></div>
  </figure>`;
}

export function Charts({ snapshot }: { snapshot: RunSnapshot }) {
  return html`<section class="charts">${CHARTS.map((spec) => html`<${Chart} key=${spec.key} spec=${spec} data=${series(snapshot, spec)} />`)}</section>`;
}
