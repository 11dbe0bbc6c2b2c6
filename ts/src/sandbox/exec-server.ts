/**
 * execd (in-container/execd.c), built once per machine and content: a static
 * binary in a folder of the sandbox's state directory named by the source's
 * hash, created atomically by rename so concurrent processes share one copy,
 * and bind-mounted read-only into task containers as their main process. It
 * runs as root there and speaks for every command, so a copy is used only if
 * this user owns it and nobody else can write it (never a shared /tmp path
 * another user could have planted).
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { sandboxHost } from "./host-settings.ts";
import { sharedFolder } from "./owned-path.ts";

const SOURCE = new URL("./in-container/execd.c", import.meta.url).pathname;

/** Where execd lives inside a container. */
export const EXEC_SERVER = { dir: "/opt/lego-exec", binary: "/opt/lego-exec/execd" } as const;

/** What execd needs to start commands as their user with an empty bounding set and to kill them at their deadline; commands keep none. */
export const EXEC_SERVER_CAPS = ["KILL", "SETUID", "SETGID", "SETPCAP"] as const;

/** Built copies by state directory (a test may point the settings elsewhere and delete that folder after). */
const built = new Map<string, string>();

/** Host folder holding the built `execd`; compiles it (a C compiler and static libc, as scripts/setup installs) on first use. */
export function execServerHostDir(): string {
  const parent = join(sandboxHost().stateDir, "execd");
  const known = built.get(parent);
  if (known && existsSync(join(known, "execd"))) return known;
  const hash = createHash("sha256").update(readFileSync(SOURCE)).digest("hex").slice(0, 16);
  const dir = sharedFolder(parent, hash, ["execd"], (tmp) => {
    try {
      execFileSync("cc", ["-static", "-O2", "-Wall", "-Werror", "-o", join(tmp, "execd"), SOURCE], { stdio: ["ignore", "ignore", "pipe"] });
    } catch (e) {
      const stderr = (e as { stderr?: Buffer }).stderr?.toString().trim();
      throw new Error(
        `building the sandbox's command server (${SOURCE}) failed: ${stderr || (e as Error).message}. ` +
          "It needs a C compiler and a static libc: run scripts/setup, or apt-get install gcc libc6-dev",
        { cause: e },
      );
    }
  });
  built.set(parent, dir);
  return dir;
}
