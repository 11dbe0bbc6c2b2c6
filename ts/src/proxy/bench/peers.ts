/** Child processes of the proxy benchmark: its own roles, and the peers it measures against (nginx, LiteLLM). */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

export interface Child {
  proc: ChildProcess;
  firstLine: Promise<string>;
  /** Writes `command` to the child's stdin and waits for its next JSON line (its answer). */
  ask(command: string): Promise<string>;
}

export function child(cmd: string, args: string[], env: Record<string, string> = {}): Child {
  const proc = spawn(cmd, args, { stdio: ["pipe", "pipe", "inherit"], env: { ...process.env, ...env } });
  const lines = createInterface({ input: proc.stdout! });
  const waiting: Array<(line: string) => void> = [];
  // The first line that is JSON is the child's report, later ones answer ask(); anything else (--trace-gc output) goes to stderr.
  const firstLine = new Promise<string>((resolve, reject) => {
    let reported = false;
    lines.on("line", (line) => {
      if (!reported && line.startsWith("{")) {
        reported = true;
        resolve(line);
      } else if (line.startsWith("{") && waiting.length > 0) waiting.shift()!(line);
      else process.stderr.write(line + "\n");
    });
    proc.once("exit", (code) => reject(new Error(`${cmd} exited with ${code} before reporting`)));
  });
  const ask = (command: string) =>
    new Promise<string>((resolve) => {
      waiting.push(resolve);
      proc.stdin!.write(command + "\n");
    });
  return { proc, firstLine, ask };
}

/** Polls until `url` answers (a benchmark helper for third-party servers that print no ready line). */
export async function waitUp(url: string, seconds: number): Promise<boolean> {
  const until = Date.now() + seconds * 1000;
  while (Date.now() < until) {
    const ok = await fetch(url).then((r) => r.status < 500, () => false);
    if (ok) return true;
    await new Promise((r) => setTimeout(r, 250));
  }
  return false;
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** nginx in front of the engine, its config, pid and logs in `dir`. */
export async function startNginx(enginePort: number, dir: string): Promise<{ proc: ChildProcess; url: string; log: string } | null> {
  if (spawnSync("nginx", ["-v"]).status !== 0) return null;
  const port = await freePort();
  writeFileSync(
    join(dir, "nginx.conf"),
    `daemon off; worker_processes 1; pid ${dir}/nginx.pid; error_log ${dir}/error.log;
events { worker_connections 4096; }
http {
  log_format hop '$request_time $upstream_response_time';
  access_log ${dir}/hop.log hop; client_max_body_size 64m; client_body_buffer_size 2m; proxy_buffering off;
  client_body_temp_path ${dir}/body; proxy_temp_path ${dir}/proxy; fastcgi_temp_path ${dir}/fcgi; uwsgi_temp_path ${dir}/uwsgi; scgi_temp_path ${dir}/scgi;
  upstream engine { server 127.0.0.1:${enginePort}; keepalive 128; }
  server { listen 127.0.0.1:${port}; location / { proxy_pass http://engine; proxy_http_version 1.1; proxy_set_header Connection ""; } }
}
`,
  );
  const proc = spawn("nginx", ["-p", dir, "-c", join(dir, "nginx.conf")], { stdio: "ignore" });
  if (!(await waitUp(`http://127.0.0.1:${port}/`, 20))) {
    proc.kill();
    return null;
  }
  return { proc, url: `http://127.0.0.1:${port}`, log: join(dir, "hop.log") };
}

/** nginx's own share of each request: $request_time - $upstream_response_time (ms; nginx logs with 1 ms resolution). */
export function nginxAdded(log: string, skip: number): number[] {
  return readFileSync(log, "utf8")
    .trim()
    .split("\n")
    .slice(skip)
    .map((line) => {
      const [total, upstream] = line.split(" ").map(Number);
      return (total! - upstream!) * 1000;
    });
}

/** `bin`: the litellm binary (`pnpm bench:proxy` passes the one scripts/bench-peers installs); "" looks on PATH. Its config goes in `dir`. */
export async function startLitellm(enginePort: number, dir: string, bin = ""): Promise<{ proc: ChildProcess; url: string } | null> {
  bin ||= "litellm";
  const env = { ...process.env, LITELLM_LOCAL_MODEL_COST_MAP: "True", LITELLM_LOG: "ERROR", LITELLM_MASTER_KEY: "sk-bench" };
  if (spawnSync(bin, ["--version"], { timeout: 60_000, env }).status !== 0) return null;
  const port = await freePort();
  writeFileSync(join(dir, "config.yaml"), `model_list:\n  - model_name: bench\n    litellm_params:\n      model: openai/bench\n      api_base: http://127.0.0.1:${enginePort}/v1\n      api_key: none\n`);
  // As many workers as cores, as LiteLLM is deployed: one worker would make it a CPU-starved peer.
  const proc = spawn(bin, ["--config", join(dir, "config.yaml"), "--port", String(port), "--host", "127.0.0.1", "--num_workers", String(availableParallelism())], { stdio: "ignore", env });
  if (!(await waitUp(`http://127.0.0.1:${port}/health/liveliness`, 120))) {
    proc.kill();
    return null;
  }
  return { proc, url: `http://127.0.0.1:${port}` };
}

