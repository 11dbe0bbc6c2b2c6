/// <reference lib="dom" />
/**
 * The Live UI page: run overview and alerts, curves, a task × harness solve grid, the
 * trajectory table (filterable) and one trajectory in full. Everything redraws from the latest
 * snapshot the server pushes; a run that stops reading cleanly shows its error above the last
 * good data rather than blanking it.
 */
import { render } from "preact";
import { html } from "htm/preact";
import { useEffect, useState } from "preact/hooks";
import { fetchTrajectory, subscribe, type RunSnapshot, type TrajectorySummary, type TrajectoryView } from "./api.ts";
import { Charts } from "./charts.ts";
import { TrajectoryPanel } from "./trajectory.ts";
import "./style.css";

function Overview({ s, live }: { s: RunSnapshot; live: boolean }) {
  return html`<header id="overview">
    <h1>lego-rl · <code>${s.runDir}</code></h1>
    <span id="live" class=${live ? "live" : "lost"}>${live ? "live" : "reconnecting"}</span>
    <dl>
      <dt>steps</dt><dd id="stat-steps">${s.status.steps}</dd>
      <dt>latest step</dt><dd>${s.status.latestStep ?? "—"}</dd>
      <dt>batches</dt><dd id="stat-batches">${s.status.batches}</dd>
      <dt>trajectories</dt><dd id="stat-trajectories">${s.status.trajectories}</dd>
      <dt>alerts</dt><dd id="stat-alerts">${s.status.alerts}</dd>
    </dl>
  </header>`;
}

function Alerts({ s }: { s: RunSnapshot }) {
  return html`<section id="alerts"><h2>alerts</h2>
    ${s.alerts.length === 0 ? html`<p class="none">none: every rule is within its threshold</p>` : html`<ul>${s.alerts.map((a) =>
      html`<li class="alert" data-kind=${a.kind}><span class="message">${a.message}</span></li>`)}</ul>`}
  </section>`;
}

/** Mean reward per task (rows) and per column (a harness, or the policy version that generated the trajectory). */
function SolveGrid({ s, id, title, column }: { s: RunSnapshot; id: string; title: string; column: (t: TrajectorySummary) => string }) {
  const tasks = [...new Set(s.trajectories.map((t) => t.task))].sort();
  const columns = [...new Set(s.trajectories.map(column))].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
  const cell = (task: string, col: string) => {
    const rs = s.trajectories.filter((t) => t.task === task && column(t) === col);
    const scored = rs.flatMap((t) => (t.reward === null ? [] : [t.reward]));
    if (rs.length === 0) return html`<td></td>`;
    const m = scored.length === 0 ? null : scored.reduce((a, b) => a + b, 0) / scored.length;
    return html`<td data-task=${task} data-column=${col} style=${m === null ? "" : `background: hsl(${120 * m} 60% 80%)`} title=${`${rs.length} rollouts, ${scored.length} graded`}>${m === null ? "env" : m.toFixed(2)} <small>(${rs.length})</small></td>`;
  };
  return html`<section class="solve-grid" id=${id}><h2>${title}</h2>
    <table><thead><tr><th>task</th>${columns.map((c) => html`<th>${c}</th>`)}</tr></thead>
    <tbody>${tasks.map((task) => html`<tr><th>${task}</th>${columns.map((c) => cell(task, c))}</tr>`)}</tbody></table></section>`;
}

const policyColumn = (t: TrajectorySummary) => (t.policyVersions === null ? "no turns" : `v${t.policyVersions[1]}`);

const matches = (t: TrajectorySummary, q: string) =>
  q === "" || [t.id, t.task, t.harness, t.status, ...t.flags].some((f) => f.toLowerCase().includes(q.toLowerCase()));

function TrajectoryTable({ s, onOpen }: { s: RunSnapshot; onOpen: (id: string) => void }) {
  const [q, setQ] = useState("");
  const rows = s.trajectories.filter((t) => matches(t, q));
  return html`<section id="trajectories"><h2>trajectories <small>(${rows.length} of ${s.trajectories.length})</small></h2>
    <input id="filter" placeholder="filter: task, harness, status, flag" value=${q} onInput=${(e: Event) => setQ((e.target as HTMLInputElement).value)} />
    <table><thead><tr><th>id</th><th>task</th><th>harness</th><th>status</th><th>reward</th><th>flags</th><th>policy</th><th>turns</th><th>tool calls</th><th>batch</th></tr></thead>
    <tbody>${rows.map((t) => html`<tr class="trajectory-row" data-id=${t.id} onClick=${() => onOpen(t.id)}>
      <td><a href=${`#t=${encodeURIComponent(t.id)}`}>${t.id}</a></td><td>${t.task}</td><td>${t.harness}</td><td class=${`status ${t.status}`}>${t.status}</td>
      <td>${t.reward ?? "—"}</td><td>${t.flags.map((f) => html`<span class="flag">${f}</span>`)}</td>
      <td>${t.policyVersions === null ? "—" : t.policyVersions[0] === t.policyVersions[1] ? `v${t.policyVersions[0]}` : `v${t.policyVersions[0]}–${t.policyVersions[1]}`}</td>
      <td>${t.turns}</td><td>${t.toolCalls}</td><td>${t.batch}</td></tr>`)}</tbody></table></section>`;
}

function App() {
  const [snapshot, setSnapshot] = useState<RunSnapshot | null>(null);
  const [runError, setRunError] = useState<string | null>(null);
  const [live, setLive] = useState(false);
  const [open, setOpen] = useState<TrajectoryView | null>(null);
  const [openError, setOpenError] = useState<string | null>(null);
  useEffect(() => subscribe({
    onSnapshot: (s) => { setSnapshot(s); setRunError(null); },
    onRunError: setRunError,
    onConnection: setLive,
  }), []);
  const openTrajectory = (id: string) => { setOpenError(null); fetchTrajectory(id).then(setOpen, (e: Error) => setOpenError(e.message)); };
  if (snapshot === null) {
    return runError === null ? html`<p id="loading">Connecting to the run…</p>` : html`<div id="run-error" class="error"><h1>Cannot read this run</h1><pre>${runError}</pre></div>`;
  }
  return html`<${Overview} s=${snapshot} live=${live} />
    ${runError === null ? null : html`<div id="run-error" class="error">The run stopped reading cleanly; showing the last good data. <pre>${runError}</pre></div>`}
    <${Alerts} s=${snapshot} />
    <${Charts} snapshot=${snapshot} />
    <div class="grids">
      <${SolveGrid} s=${snapshot} id="solve-grid-harness" title="mean reward, task × harness" column=${(t: TrajectorySummary) => t.harness} />
      <${SolveGrid} s=${snapshot} id="solve-grid-policy" title="mean reward, task × policy version (newest turn's)" column=${policyColumn} />
    </div>
    <${TrajectoryTable} s=${snapshot} onOpen=${openTrajectory} />
    ${openError === null ? null : html`<p id="open-error" class="error">${openError}</p>`}
    ${open === null ? null : html`<${TrajectoryPanel} view=${open} onClose=${() => setOpen(null)} />`}`;
}

render(html`<${App} />`, document.getElementById("app")!);
