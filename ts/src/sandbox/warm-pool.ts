/**
 * Pre-started sandboxes for one hot image. Starting a container costs ~0.5 s
 * of daemon and runc work on a 2-core machine; taking one from the pool costs
 * nothing. After each take the pool refills in the background, one start at
 * a time so refills do not starve the rollouts already running.
 */
export interface WarmPoolConfig {
  /** Ready sandboxes to keep. 0 disables the pool (every acquire starts one). */
  size: number;
  /** Concurrent background starts while refilling. */
  fillConcurrency: number;
}

export class WarmPool<T> {
  private readonly ready: T[] = [];
  private filling = 0;
  private readonly pending = new Set<Promise<void>>();
  private closed = false;
  private fullWaiters: Array<() => void> = [];
  /** The last background start failure; refilling pauses until the next acquire. */
  lastError: unknown;

  constructor(
    private readonly make: () => Promise<T>,
    private readonly dispose: (t: T) => Promise<void>,
    readonly config: WarmPoolConfig,
  ) {}

  get readyCount(): number {
    return this.ready.length;
  }

  /** Begins filling to `size`. */
  start(): this {
    this.fill();
    return this;
  }

  /** Resolves once `size` sandboxes are ready (benchmarks and tests wait on this, never on a timer). */
  whenFull(): Promise<void> {
    if (this.ready.length >= this.config.size || this.closed) return Promise.resolve();
    return new Promise((r) => this.fullWaiters.push(r));
  }

  /** A ready sandbox if one is waiting, otherwise a freshly started one. */
  async acquire(): Promise<T> {
    if (this.closed) throw new Error("warm pool is closed");
    const t = this.ready.shift();
    this.lastError = undefined;
    this.fill();
    return t ?? this.make();
  }

  /** A ready item if one is waiting, otherwise undefined (the caller makes its own); refills either way. */
  take(): T | undefined {
    if (this.closed) return undefined;
    const t = this.ready.shift();
    this.lastError = undefined;
    this.fill();
    return t;
  }

  private fill(): void {
    while (
      !this.closed &&
      this.lastError === undefined &&
      this.filling < this.config.fillConcurrency &&
      this.ready.length + this.filling < this.config.size
    ) {
      this.filling++;
      const p: Promise<void> = this.make().then(
        (t) => {
          this.filling--;
          if (this.closed) return this.dispose(t).catch((e: unknown) => void (this.lastError = e));
          this.ready.push(t);
          if (this.ready.length >= this.config.size) this.notifyFull();
          this.fill();
        },
        (e: unknown) => {
          this.filling--;
          this.lastError = e;
          this.notifyFull();
        },
      );
      this.pending.add(p);
      void p.finally(() => this.pending.delete(p));
    }
  }

  private notifyFull(): void {
    const w = this.fullWaiters;
    this.fullWaiters = [];
    for (const r of w) r();
  }

  /** Disposes every ready sandbox; in-flight starts are disposed as they land. */
  async close(): Promise<void> {
    this.closed = true;
    this.notifyFull();
    const all = this.ready.splice(0);
    await Promise.all([...all.map((t) => this.dispose(t)), ...this.pending]);
  }
}
