/**
 * A stopped process's last resort: exit with the exit code already set if the event loop has not emptied
 * within `graceMs`, naming on stderr what still held it so the leak can be found. The timer is unref'd, so a
 * loop that empties first exits as usual and this never fires.
 */
export function exitOnceClosed(graceMs: number): void {
  setTimeout(() => {
    const held = holdingTheLoop();
    const message = `lego rollout: stopped, but ${held.join(", ") || "no named resource"} still held the process ${graceMs / 1000} s after its summary; exiting\n`;
    // Exit once the line is out (a pipe's queued writes are dropped by exit), or a second later regardless.
    setTimeout(() => process.exit(), 1_000).unref();
    process.stderr.write(message, () => process.exit());
  }, graceMs).unref();
}

/**
 * What keeps the loop alive: referenced handles other than stdout and stderr (which are listed but do not
 * hold it), by class, and referenced timers. Node names handles only through this long-stable internal.
 */
function holdingTheLoop(): string[] {
  const handles = (process as unknown as { _getActiveHandles(): Array<{ constructor?: { name?: string }; hasRef?(): boolean }> })._getActiveHandles();
  const named = handles
    .filter((h) => h !== process.stdout && h !== process.stderr && h.hasRef?.() !== false)
    .map((h) => h.constructor?.name ?? "unknown handle");
  const timers = process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length;
  return [...named, ...(timers ? [`${timers} timer(s)`] : [])];
}
