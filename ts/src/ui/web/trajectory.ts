/// <reference lib="dom" />
/**
 * One trajectory turn by turn: each turn's new context tokens and its completion, every token a
 * span coloured by trainability (loss mask, provenance) and, for trainable tokens, shaded by the
 * rollout logprob; segment boundaries with the reason each was sealed; flags and error.
 */
import { html } from "htm/preact";
import type { TokenRun, TrajectoryView, TurnView } from "./api.ts";

/** Longest run of tokens drawn one span each; the rest is counted, so a huge prompt cannot stall the page. */
const MAX_TOKENS_SHOWN = 4000;
/** TokenProvenance values (schemas/records.toml): prompt 0, template 1, sampled 2. */
const PROVENANCE = ["prompt", "template", "sampled"] as const;

function tokenClass(run: TokenRun, i: number): string {
  if (run.lossMask[i] === 1) return "tok trainable";
  return `tok ${PROVENANCE[run.provenance[i]!] ?? "unknown"}`;
}

/** Trainable tokens darken as their sampled probability falls: unlikely samples stand out. */
function tokenStyle(run: TokenRun, i: number): string | undefined {
  if (run.lossMask[i] !== 1) return undefined;
  const surprise = Math.min(1, -run.logprobs[i]! / 5);
  return `background: hsl(140 55% ${88 - 45 * surprise}%)`;
}

const visible = (piece: string) => piece.replace(/\n/g, "⏎").replace(/\t/g, "⇥").replace(/ /g, "·") || "∅";

function Tokens({ run, kind, label = kind }: { run: TokenRun; kind: "context" | "completion" | "tail"; label?: string }) {
  const shown = Math.min(run.ids.length, MAX_TOKENS_SHOWN);
  const spans = [];
  for (let i = 0; i < shown; i++) {
    const what = run.lossMask[i] === 1 ? "trainable" : PROVENANCE[run.provenance[i]!] ?? "unknown";
    // With a tokenizer each span shows its text piece (whitespace made visible), else the id.
    const shownAs = run.pieces === undefined ? String(run.ids[i]) : visible(run.pieces[i]!);
    spans.push(html`<span class=${tokenClass(run, i)} style=${tokenStyle(run, i)} title=${`token ${run.ids[i]} · ${what} · logprob ${run.logprobs[i]!.toFixed(3)}`}>${shownAs}</span>`);
  }
  return html`<div class=${`tokens ${kind}`}><span class="run-label">${label} (${run.ids.length})</span>${spans}${run.ids.length > shown ? html`<em> … ${run.ids.length - shown} more</em>` : null}</div>`;
}

function Message({ turn }: { turn: TurnView }) {
  const m = turn.message;
  if (m === undefined) return null;
  return html`<div class="message">
    ${turn.prompt.text === undefined ? null : html`<details class="context-text"><summary>context added before this turn (${turn.prompt.ids.length} tokens: tool results, user text, template)</summary><pre>${turn.prompt.text}</pre></details>`}
    ${m.reasoning === null ? null : html`<details class="reasoning"><summary>reasoning</summary><pre>${m.reasoning}</pre></details>`}
    ${m.content.trim() === "" ? null : html`<pre class="content">${m.content}</pre>`}
    ${m.toolCalls.map((c) => html`<div class="tool-call"><b class="tool-name">${c.name}</b> <code class="tool-args">${c.arguments}</code></div>`)}
  </div>`;
}

function Turn({ turn, index }: { turn: TurnView; index: number }) {
  return html`<div class="turn" data-turn=${turn.turnId}>
    <h4>turn ${index + 1} · policy v${turn.policyVersion} · finish: ${turn.finishReason}</h4>
    <${Message} turn=${turn} />
    <${Tokens} run=${turn.prompt} kind="context" />
    <${Tokens} run=${turn.completion} kind="completion" />
  </div>`;
}

export function TrajectoryPanel({ view, onClose }: { view: TrajectoryView; onClose: () => void }) {
  const s = view.summary;
  return html`<section id="trajectory" data-id=${s.id}>
    <header><h2>trajectory <code>${s.id}</code></h2><button id="close-trajectory" onClick=${onClose}>close</button></header>
    <p class="meta">task <b>${s.task}</b> · harness <b>${s.harness}</b> · status <b class=${`status ${s.status}`}>${s.status}</b> · reward <b>${s.reward ?? "—"}</b>
      · ${view.metrics.turns} turns · ${view.metrics.tool_calls} tool calls · ${view.metrics.rereads_after_edit} re-reads after edit · ${view.metrics.wall_time_s.toFixed(1)} s</p>
    <p id="traj-flags">flags: ${s.flags.length === 0 ? html`<span class="none">none</span>` : s.flags.map((f) => html`<span class="flag">${f}</span>`)}</p>
    ${view.error === null ? null : html`<p id="traj-error" class="error">error: ${view.error}</p>`}
    <p class="legend">tokens: <span class="tok trainable">trainable</span> (darker = lower rollout probability)
      <span class="tok sampled">sampled, not trained</span> <span class="tok prompt">prompt</span> <span class="tok template">template</span></p>
    ${view.segments.map((seg) => html`<div class="segment" data-segment=${seg.id}>
      <h3>segment <code>${seg.id}</code> · ${seg.thread} (${seg.threadId}) · sealed: <b class="seal">${seg.sealReason}</b>
        ${seg.routingRecorded === null ? " · dense" : ` · routing recorded for ${seg.routingRecorded[0]}/${seg.routingRecorded[1]} trainable tokens`}</h3>
      ${seg.turns.map((t, i) => html`<${Turn} key=${t.turnId} turn=${t} index=${i} />`)}
      ${seg.tail.ids.length === 0 ? null : html`<${Tokens} run=${seg.tail} kind="tail" label="after the last turn" />`}
    </div>`)}
  </section>`;
}
