/**
 * A counting limit on sandboxes in flight. Concurrent container starts
 * saturate a small machine's cores (runc + daemon work), so the rollout
 * worker bounds them instead of letting every rollout start at once.
 */
export class ConcurrencyLimit {
  private active = 0;
  private readonly waiters: Array<() => void> = [];

  constructor(readonly limit: number) {
    if (!Number.isInteger(limit) || limit < 1) throw new Error(`concurrency limit must be a positive integer, got ${limit}`);
  }

  get inFlight(): number {
    return this.active;
  }

  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.active >= this.limit) await new Promise<void>((r) => this.waiters.push(r));
    else this.active++;
    try {
      return await fn();
    } finally {
      const next = this.waiters.shift();
      // Hand the slot straight to the next waiter; `active` stays the same.
      if (next) next();
      else this.active--;
    }
  }
}
