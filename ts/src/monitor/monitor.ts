/**
 * The one place every batch summary and trainer step passes through. Keeps a sliding window
 * per rule, raises an alert once when a rule starts breaching and re-arms when it recovers,
 * so a persistent fault does not flood the log.
 */
import { type Alert, defaultRules, type Rule, type Signal } from "./rules.ts";

export interface MonitorOptions {
  rules?: Rule[];
  /** Sink for alerts (logs, step log, UI). */
  onAlert?: (alert: Alert) => void;
}

export class Monitor {
  readonly rules: Rule[];
  readonly alerts: Alert[] = [];
  private readonly history = new Map<Rule, number[]>();
  private readonly firing = new Set<Rule>();
  private readonly onAlert: (a: Alert) => void;

  constructor(opts: MonitorOptions = {}) {
    this.rules = opts.rules ?? defaultRules();
    this.onAlert = opts.onAlert ?? (() => {});
  }

  /** Feed one observation (a trainer step's metrics or a batch summary); returns alerts raised by it. */
  observe(at: number, signal: Signal): Alert[] {
    const raised: Alert[] = [];
    for (const rule of this.rules) {
      const v = signal[rule.key];
      if (v === undefined || !Number.isFinite(v)) continue;
      const h = this.history.get(rule) ?? [];
      h.push(v);
      if (h.length > rule.window) h.shift();
      this.history.set(rule, h);
      if (h.length < rule.window) continue;
      const breach = rule.check(h, rule.threshold);
      if (breach === undefined) { this.firing.delete(rule); continue; }
      if (this.firing.has(rule)) continue;
      this.firing.add(rule);
      const alert: Alert = { kind: rule.kind, at, value: breach, threshold: rule.threshold, window: rule.window,
        message: `${rule.kind} at ${at} (${rule.key}=${v}, threshold ${rule.threshold}, window ${rule.window}): ${rule.advice}` };
      raised.push(alert);
      this.alerts.push(alert);
      this.onAlert(alert);
    }
    return raised;
  }
}
