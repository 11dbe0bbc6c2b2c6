/**
 * Workspace files that shadow a module of the grading image. A file the agent
 * creates named like a standard-library or installed top-level module
 * (`json.py`, `pytest/__init__.py`, `numpy.py`) would be imported in its
 * place by whatever imports that name later in the verifier, once the
 * workspace is on sys.path. The verdict plugin keeps the standard library
 * first at every import; this scan covers the rest (installed modules, a
 * verifier without the plugin): a rollout that creates such a file is
 * flagged `shadowed_module` and scores 0.
 *
 * The module names are computed inside the grading image (its python3's
 * `sys.stdlib_module_names`, builtins and every top-level module on sys.path
 * outside the workspace), once per image.
 */
import { posix } from "node:path";
import type { Sandbox } from "./container.ts";
import { SandboxEnvError } from "./errors.ts";
import type { TarEntry, TarFile } from "./tar.ts";
import { WORKSPACE } from "./types.ts";

const LIST_MODULES = [
  "import json, pkgutil, sys",
  `outside = [p for p in sys.path if p and p != "${WORKSPACE}" and not p.startswith("${WORKSPACE}/")]`,
  "names = set(sys.stdlib_module_names) | set(sys.builtin_module_names) | {m.name for m in pkgutil.iter_modules(outside)}",
  "print(json.dumps(sorted(names)))",
].join("\n");

/** Module names per image. Tags are content hashes, so an entry never goes stale. */
const namesCache = new Map<string, ReadonlySet<string>>();
const NAMES_CACHE_ENTRIES = 32;

/** Top-level module names the image's python3 can import from outside the workspace. */
export async function moduleNamesOf(image: string, sb: Sandbox): Promise<ReadonlySet<string>> {
  const hit = namesCache.get(image);
  if (hit) return hit;
  const r = await sb.exec(["python3", "-I", "-c", LIST_MODULES], { timeoutMs: 60_000, capBytes: 8 << 20 });
  if (r.exitCode !== 0) {
    throw new SandboxEnvError("setup_failed", `listing the image's python modules exited ${r.exitCode}: ${r.stderr.slice(-1000)}`, sb.context(),
      "the task image needs a working python3");
  }
  const names = new Set(JSON.parse(r.stdout) as string[]);
  if (namesCache.size >= NAMES_CACHE_ENTRIES) namesCache.delete(namesCache.keys().next().value!);
  namesCache.set(image, names);
  return names;
}

/** `x.py`, `x.pyc`, `x.cpython-311-x86_64-linux-gnu.so`, `x.abi3.so`: the module name, or undefined. */
function moduleOfFile(base: string): string | undefined {
  const m = /^([A-Za-z_][A-Za-z0-9_]*)\.(?:py|pyc|pyw|(?:[A-Za-z0-9_-]+\.)?so)$/.exec(base);
  return m ? m[1] : undefined;
}

/**
 * Paths (workspace-relative) of written files that create a top-level module
 * named like one in `names`. A file counts only where its folder is not a
 * regular package (an `__init__.py` beside it makes it `pkg.json`, which
 * shadows nothing), and only if the pristine workspace had no module of that
 * name in that folder (changing the repository's own modules is the task).
 */
export function shadowingFiles(written: TarFile[], pristine: Map<string, TarEntry>, removed: string[], names: ReadonlySet<string>): string[] {
  const after = new Set([...pristine.keys()].filter((p) => !removed.includes(p)));
  for (const f of written) after.add(f.path);
  // The workspace root is on sys.path in every layout, __init__.py or not.
  const isPackage = (dir: string) => dir !== "." && after.has(`${dir}/__init__.py`);
  const pristineModules = new Set<string>();
  const moduleAt = (rel: string): { dir: string; name: string } | undefined => {
    const base = posix.basename(rel);
    let dir = posix.dirname(rel);
    let name = moduleOfFile(base);
    if (name === "__init__") {
      name = posix.basename(dir);
      dir = posix.dirname(dir);
      if (name === ".") return undefined;
    }
    return name ? { dir, name } : undefined;
  };
  for (const rel of pristine.keys()) {
    const m = moduleAt(rel);
    if (m) pristineModules.add(`${m.dir}\0${m.name}`);
  }
  const out: string[] = [];
  for (const f of written) {
    const m = moduleAt(f.path);
    if (!m || !names.has(m.name) || pristineModules.has(`${m.dir}\0${m.name}`)) continue;
    if (isPackage(m.dir)) continue;
    out.push(f.path);
  }
  return out.sort();
}
