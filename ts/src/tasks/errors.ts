/** Typed errors of the task sources. Each names the file (and line or field) a user must fix. */

export class TaskSourceError extends Error {
  override name = "TaskSourceError";
  constructor(
    /** The file, directory or suite name the problem is in. */
    readonly where: string,
    /** `line 12`, `instance_id`, `line 12: FAIL_TO_PASS`, … */
    readonly field: string,
    detail: string,
  ) {
    super(`${where}: ${field}: ${detail}`);
  }
}

/** A task's repository (local git repository or archive) could not be found or read. */
export class TaskRepoError extends TaskSourceError {
  override name = "TaskRepoError";
}

export function isTaskSourceError(error: unknown): error is TaskSourceError {
  return error instanceof TaskSourceError;
}
