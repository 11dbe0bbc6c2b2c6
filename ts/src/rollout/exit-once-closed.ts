/**
 * A stopped process's last resort: exit with the exit code already set if the event loop has not emptied
 * within `graceMs`, naming on stderr what still held it so the leak can be found. The timer is unref'd, so a
 * loop that empties first exits as usual and this never fires.
 */
export function exitOnceClosed(graceMs: number): void {
  setTimeout(() => {
    const open = process.getActiveResourcesInfo().filter((kind) => kind !== "Timeout");
    process.stderr.write(`lego rollout: stopped, but ${open.join(", ") || "no named resource"} still held the process ` +
      `${graceMs / 1000} s after its summary; exiting\n`);
    process.exit();
  }, graceMs).unref();
}
