import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root folder (this file is ts/src/repo-root.ts): where schemas/, python-bridge/ and .venv live. */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
