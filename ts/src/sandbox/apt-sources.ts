import { readFileSync, readdirSync, existsSync } from "node:fs";
import { join } from "node:path";

/** One Debian archive the machine's apt is configured to use. */
export interface AptSource {
  uri: string;
  suites: string[];
  components: string[];
}

/**
 * Parses apt sources in both formats: one-line `deb URI SUITE COMP…`
 * (sources.list) and deb822 stanzas (`*.sources`, see sources.list(5)).
 * Disabled files (any other extension) are skipped, as apt skips them.
 */
export function parseAptSources(text: string, deb822: boolean): AptSource[] {
  const out: AptSource[] = [];
  if (!deb822) {
    for (const raw of text.split("\n")) {
      const line = raw.replace(/#.*/, "").trim();
      const m = /^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s*(.*)$/.exec(line);
      if (m) out.push({ uri: m[1]!, suites: [m[2]!], components: m[3]!.split(/\s+/).filter(Boolean) });
    }
    return out;
  }
  for (const stanza of text.split(/\n\s*\n/)) {
    const fields = new Map<string, string>();
    for (const raw of stanza.split("\n")) {
      if (raw.startsWith("#")) continue;
      const m = /^([A-Za-z-]+):\s*(.*)$/.exec(raw);
      if (m) fields.set(m[1]!.toLowerCase(), m[2]!.trim());
    }
    if (fields.get("enabled")?.toLowerCase() === "no") continue;
    if (!(fields.get("types") ?? "").split(/\s+/).includes("deb")) continue;
    const uris = (fields.get("uris") ?? "").split(/\s+/).filter(Boolean);
    const suites = (fields.get("suites") ?? "").split(/\s+/).filter(Boolean);
    const components = (fields.get("components") ?? "").split(/\s+/).filter(Boolean);
    for (const uri of uris) out.push({ uri, suites, components });
  }
  return out;
}

/** All apt sources configured on this machine (/etc/apt/sources.list + sources.list.d). */
export function machineAptSources(root = "/etc/apt"): AptSource[] {
  const out: AptSource[] = [];
  const list = join(root, "sources.list");
  if (existsSync(list)) out.push(...parseAptSources(readFileSync(list, "utf8"), false));
  const dir = join(root, "sources.list.d");
  if (existsSync(dir)) {
    for (const f of readdirSync(dir).sort()) {
      if (f.endsWith(".list")) out.push(...parseAptSources(readFileSync(join(dir, f), "utf8"), false));
      if (f.endsWith(".sources")) out.push(...parseAptSources(readFileSync(join(dir, f), "utf8"), true));
    }
  }
  return out;
}

/**
 * The mirror that serves `suite` with the `main` component — what debootstrap
 * needs. Security and update suites are other archives and are not chosen.
 */
export function debianMirrorFor(suite: string, sources: AptSource[] = machineAptSources()): string | undefined {
  return sources.find((s) => s.suites.includes(suite) && s.components.includes("main"))?.uri;
}
