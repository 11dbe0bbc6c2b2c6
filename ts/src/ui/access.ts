/**
 * Who may talk to the Live UI: requests addressed to the server's own host (a DNS-rebinding
 * page names another Host), from no origin or the server's own (another site's page is
 * refused), carrying the access token from the printed URL or the cookie that URL set.
 */
import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";

export const TOKEN_COOKIE = "lego_ui_token";

export type AccessVerdict = { ok: true; setCookie: boolean } | { ok: false; status: 401 | 403; reason: string };

const sameToken = (a: string, b: string) => a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));

function cookieToken(header: string | undefined): string | undefined {
  for (const part of (header ?? "").split(";")) {
    const [k, ...v] = part.trim().split("=");
    if (k === TOKEN_COOKIE) return v.join("=");
  }
  return undefined;
}

export function checkAccess(req: IncomingMessage, url: URL, allowedHosts: ReadonlySet<string>, token: string): AccessVerdict {
  const host = req.headers.host ?? "";
  if (!allowedHosts.has(host)) return { ok: false, status: 403, reason: `host ${JSON.stringify(host)} is not this server's; open the URL \`lego ui\` printed` };
  const origin = req.headers.origin;
  if (origin !== undefined && origin !== "null" && !allowedHosts.has(origin.replace(/^http:\/\//, ""))) {
    return { ok: false, status: 403, reason: `requests from origin ${origin} are refused; the Live UI answers only its own page` };
  }
  if (origin === "null" || req.headers["sec-fetch-site"] === "cross-site") return { ok: false, status: 403, reason: "cross-site requests are refused" };
  const fromQuery = url.searchParams.get("token");
  if (fromQuery !== null && sameToken(fromQuery, token)) return { ok: true, setCookie: true };
  const fromCookie = cookieToken(req.headers.cookie);
  if (fromCookie !== undefined && sameToken(fromCookie, token)) return { ok: true, setCookie: false };
  return { ok: false, status: 401, reason: "missing or wrong access token: open the URL (with ?token=…) that `lego ui` printed" };
}
