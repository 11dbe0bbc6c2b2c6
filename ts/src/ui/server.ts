/**
 * The Live UI's HTTP server: the built page and its assets, the run as JSON, one trajectory in
 * full, and a Server-Sent Events stream that pushes a new snapshot whenever the run folder
 * changes (a step logged, a batch spooled). Bound to loopback unless told otherwise; every
 * request passes `checkAccess` (host, origin, token).
 */
import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { extname, join, resolve, sep } from "node:path";
import { RunDirError, runDirView, type RunView } from "../mcp/index.ts";
import { checkAccess, TOKEN_COOKIE } from "./access.ts";
import { errorPage } from "./pages.ts";
import { runSnapshot, trajectoryView } from "./snapshot.ts";
import type { TokenText } from "./text.ts";

export interface UiServerConfig {
  /** Run folder: steps.jsonl and spool/ (see mcp/run-dir.ts). */
  runDir: string;
  /** Interface to bind; loopback unless the operator chooses otherwise. */
  host: string;
  /** 0 picks a free port. */
  port: number;
  /** Folder holding the built page (index.html, assets/). */
  assetsDir: string;
  /** Access token; random when omitted. */
  token?: string;
  /** How often the run folder is checked for changes, in ms. */
  pollMs: number;
  /** A second run folder whose curves are drawn beside this run's. */
  compareDir?: string;
  /** Decodes tokens to text and parses tool calls in the trajectory view; ids only without it. */
  text?: TokenText;
}

const CONTENT_TYPES: Record<string, string> = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml" };

/** Sizes and mtimes of everything the view reads: a change means a new snapshot is due. */
function fingerprint(runDir: string): string {
  const parts: string[] = [];
  const walk = (p: string) => {
    // A spool file may be renamed or released between listing and stat: that is a change, not an error.
    const st = statSync(p, { throwIfNoEntry: false });
    if (st === undefined) { parts.push(`${p}:-`); return; }
    if (st.isDirectory()) {
      let names: string[] = [];
      try {
        names = readdirSync(p).sort();
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
        parts.push(`${p}:gone`);
      }
      for (const name of names) walk(join(p, name));
    } else parts.push(`${p}:${st.size}:${st.mtimeMs}`);
  };
  walk(join(runDir, "steps.jsonl"));
  walk(join(runDir, "spool"));
  return parts.join("|");
}

const errorMessage = (e: unknown) => (e instanceof Error ? e.message : String(e));

export class UiServer {
  readonly token: string;
  private readonly http: Server;
  private readonly view: RunView;
  private readonly compare: { runDir: string; view: RunView } | undefined;
  private readonly clients = new Set<ServerResponse>();
  private timer: NodeJS.Timeout | undefined;
  private lastFingerprint = "";
  private allowedHosts = new Set<string>();

  constructor(readonly config: UiServerConfig) {
    this.token = config.token ?? randomBytes(16).toString("hex");
    this.view = runDirView(config.runDir);
    this.compare = config.compareDir === undefined ? undefined : { runDir: config.compareDir, view: runDirView(config.compareDir) };
    this.http = createServer((req, res) => this.handle(req, res));
  }

  async listen(): Promise<string> {
    await new Promise<void>((ok, fail) => {
      this.http.once("error", fail);
      this.http.listen(this.config.port, this.config.host, () => ok());
    });
    const port = (this.http.address() as AddressInfo).port;
    const hosts = [this.config.host, ...(["127.0.0.1", "localhost", "::1"].includes(this.config.host) ? ["127.0.0.1", "localhost", "[::1]"] : [])];
    this.allowedHosts = new Set(hosts.map((h) => `${h.includes(":") && !h.startsWith("[") ? `[${h}]` : h}:${port}`));
    this.lastFingerprint = this.fingerprint();
    this.timer = setInterval(() => this.poll(), this.config.pollMs);
    const shown = this.config.host.includes(":") ? `[${this.config.host}]` : this.config.host;
    return `http://${shown}:${port}/?token=${this.token}`;
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    for (const c of this.clients) c.end();
    this.http.closeAllConnections();
    await new Promise<void>((ok) => this.http.close(() => ok()));
  }

  private poll(): void {
    let frame: string;
    try {
      const fp = this.fingerprint();
      if (fp === this.lastFingerprint || this.clients.size === 0) return;
      this.lastFingerprint = fp;
      frame = this.snapshotFrame();
    } catch (e) {
      // An unreadable run folder (permissions) is the page's to show; the server keeps serving.
      frame = `event: run-error\ndata: ${JSON.stringify({ message: errorMessage(e) })}\n\n`;
    }
    for (const c of this.clients) c.write(frame);
  }

  private fingerprint(): string {
    return [this.config.runDir, this.config.compareDir].flatMap((d) => (d === undefined ? [] : [fingerprint(d)])).join("#");
  }

  private snapshot() {
    return runSnapshot(this.config.runDir, this.view, this.compare);
  }

  private snapshotFrame(): string {
    try {
      return `event: snapshot\ndata: ${JSON.stringify(this.snapshot())}\n\n`;
    } catch (e) {
      return `event: run-error\ndata: ${JSON.stringify({ message: errorMessage(e) })}\n\n`;
    }
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? "/", "http://local");
    const verdict = checkAccess(req, url, this.allowedHosts, this.token);
    if (!verdict.ok) return this.send(res, verdict.status, "text/html; charset=utf-8", errorPage("Refused", verdict.reason, "Open the URL printed by `lego ui` in a browser on this machine."));
    if (verdict.setCookie) res.setHeader("set-cookie", `${TOKEN_COOKIE}=${this.token}; HttpOnly; SameSite=Strict; Path=/`);
    if (req.method !== "GET") return this.send(res, 405, "text/plain", "only GET");
    try {
      if (url.pathname === "/") return this.page(res);
      if (url.pathname === "/api/run") return this.json(res, 200, this.snapshot());
      if (url.pathname === "/api/trajectory") return this.trajectory(res, url.searchParams.get("id") ?? "");
      if (url.pathname === "/api/events") return this.events(req, res);
      if (url.pathname.startsWith("/assets/")) return this.asset(res, url.pathname);
      return this.send(res, 404, "text/plain", `no route ${url.pathname}`);
    } catch (e) {
      if (url.pathname.startsWith("/api/")) return this.json(res, 500, { error: errorMessage(e) });
      return this.send(res, 500, "text/plain", errorMessage(e));
    }
  }

  private page(res: ServerResponse): void {
    const index = join(this.config.assetsDir, "index.html");
    if (!existsSync(index)) {
      return this.send(res, 500, "text/html; charset=utf-8", errorPage("The Live UI is not built", `${index} is missing`, "Run scripts/setup (it builds the page), or `lego ui` without --assets-dir to build it."));
    }
    try {
      this.snapshot();
    } catch (e) {
      const missing = e instanceof RunDirError && !existsSync(this.config.runDir);
      return this.send(res, missing ? 404 : 500, "text/html; charset=utf-8", errorPage(missing ? "Run folder not found" : "Cannot read this run", errorMessage(e),
        missing ? "Pass --run-dir the folder the trainer (steps.jsonl) and rollout worker (spool/) write." : "Fix or move aside the file named above; the page retries on its own once the run folder reads cleanly."));
    }
    this.send(res, 200, CONTENT_TYPES[".html"]!, readFileSync(index));
  }

  private trajectory(res: ServerResponse, id: string): void {
    const t = this.view.trajectories().find((x) => x.trajectory_id === id);
    if (t === undefined) return this.json(res, 404, { error: `no trajectory ${JSON.stringify(id)} in ${this.config.runDir}` });
    this.json(res, 200, trajectoryView(t, this.config.text));
  }

  private events(req: IncomingMessage, res: ServerResponse): void {
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-store", connection: "keep-alive" });
    res.write(`retry: 1000\n\n${this.snapshotFrame()}`);
    this.clients.add(res);
    req.on("close", () => this.clients.delete(res));
  }

  private asset(res: ServerResponse, pathname: string): void {
    const root = resolve(this.config.assetsDir);
    const file = resolve(root, `.${decodeURIComponent(pathname)}`);
    if (!file.startsWith(root + sep) || !existsSync(file) || !statSync(file).isFile()) return this.send(res, 404, "text/plain", `no asset ${pathname}`);
    this.send(res, 200, CONTENT_TYPES[extname(file)] ?? "application/octet-stream", readFileSync(file));
  }

  private json(res: ServerResponse, status: number, body: unknown): void {
    this.send(res, status, "application/json", JSON.stringify(body));
  }

  private send(res: ServerResponse, status: number, type: string, body: string | Buffer): void {
    // No framing by other pages (clickjacking) and no content sniffing.
    res.writeHead(status, { "content-type": type, "cache-control": "no-store", "x-content-type-options": "nosniff", "x-frame-options": "DENY" });
    res.end(body);
  }
}
