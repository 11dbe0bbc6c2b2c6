/**
 * Shared, writable memory mappings of files (ts/native/mapped-file.c), so a
 * framed batch is written once, straight into its spool file's pages, and
 * ZeroMQ sends from those pages. Without the native module (no C compiler at
 * set-up) `mapFile` returns null and the spool writes with write(), one more
 * copy per batch; a Sender with `fileMapping: false` does so by choice.
 */
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const MODULE_PATH = fileURLToPath(new URL("../../native/build/mapped-file.node", import.meta.url));

interface NativeMapping {
  mapFile(fd: number, length: number): ArrayBuffer;
  allocate(fd: number, length: number): void;
}

function load(): { native: NativeMapping | null; reason: string | null } {
  try {
    return { native: createRequire(import.meta.url)(MODULE_PATH) as NativeMapping, reason: null };
  } catch (error) {
    return { native: null, reason: `${MODULE_PATH} not loadable (run scripts/setup): ${(error as Error).message.split("\n")[0]}` };
  }
}

const loaded = load();

/** Why file mapping is off, or null when it is on. */
export const fileMappingUnavailable: string | null = loaded.reason;

/**
 * The first `length` bytes of the open file `fd`, mapped shared and writable
 * (writes reach the file's page cache; fsync makes them durable). The length
 * may run past the end of the file, but touching a page past it is a SIGBUS:
 * callers size the file first. Null when mapping is unavailable.
 */
export function mapFile(fd: number, length: number): Uint8Array | null {
  return loaded.native ? new Uint8Array(loaded.native.mapFile(fd, length)) : null;
}

/**
 * Reserves the file's blocks up to `length` (growing it if shorter). A store
 * into a mapped page the file system cannot back is a SIGBUS, not an error,
 * so the spool reserves first: a full disk then throws ENOSPC, as write() does.
 */
export function allocateFile(fd: number, length: number): void {
  if (!loaded.native) throw new Error(`file mapping is unavailable: ${loaded.reason}`);
  loaded.native.allocate(fd, length);
}
