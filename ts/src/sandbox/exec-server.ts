/**
 * execd (in-container/execd.c), built once per machine and content: a static
 * binary in a host folder named by the source's hash, created atomically by
 * rename so concurrent processes share one copy, and bind-mounted read-only
 * into task containers as their main process.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, existsSync, mkdtempSync, readFileSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const SOURCE = new URL("./in-container/execd.c", import.meta.url).pathname;

/** Where execd lives inside a container. */
export const EXEC_SERVER = { dir: "/opt/lego-exec", binary: "/opt/lego-exec/execd" } as const;

/** What execd needs to start commands as their user with an empty bounding set and to kill them at their deadline; commands keep none. */
export const EXEC_SERVER_CAPS = ["KILL", "SETUID", "SETGID", "SETPCAP"] as const;

let built: string | undefined;

/** Host folder holding the built `execd`; compiles it (a C compiler and static libc, as scripts/setup installs) on first use. */
export function execServerHostDir(): string {
  if (built && existsSync(join(built, "execd"))) return built;
  const source = readFileSync(SOURCE);
  const dir = join(tmpdir(), `lego-rl-execd-${createHash("sha256").update(source).digest("hex").slice(0, 16)}`);
  if (!existsSync(join(dir, "execd"))) {
    const tmp = mkdtempSync(join(tmpdir(), "lego-rl-execd-tmp-"));
    try {
      execFileSync("cc", ["-static", "-O2", "-Wall", "-Werror", "-o", join(tmp, "execd"), SOURCE], { stdio: ["ignore", "ignore", "pipe"] });
    } catch (e) {
      rmSync(tmp, { recursive: true, force: true });
      const stderr = (e as { stderr?: Buffer }).stderr?.toString().trim();
      throw new Error(
        `building the sandbox's command server (${SOURCE}) failed: ${stderr || (e as Error).message}. ` +
          "It needs a C compiler and a static libc: run scripts/setup, or apt-get install gcc libc6-dev",
        { cause: e },
      );
    }
    chmodSync(tmp, 0o755);
    try {
      renameSync(tmp, dir);
    } catch {
      rmSync(tmp, { recursive: true, force: true }); // another process won the race
    }
  }
  built = dir;
  return dir;
}
