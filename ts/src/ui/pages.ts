/** Server-rendered pages for when the app cannot start: a refused request, an unreadable run. */
const escape = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

export function errorPage(title: string, detail: string, fix: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>lego-rl · ${escape(title)}</title>
<style>body{font:15px system-ui,sans-serif;margin:3rem;max-width:60rem;color:#222}h1{color:#b00020;font-size:1.4rem}code,pre{background:#f4f4f4;padding:.2rem .4rem;white-space:pre-wrap}</style>
</head><body><h1 id="error-title">${escape(title)}</h1><pre id="error-detail">${escape(detail)}</pre><p id="error-fix">${escape(fix)}</p></body></html>`;
}
