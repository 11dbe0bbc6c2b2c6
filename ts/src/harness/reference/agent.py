#!/usr/bin/env python3
"""The reference agent: a small, clear coding agent on OpenAI Chat Completions.

It runs on what the base image has (python3, stdlib only) and talks to the
proxy session named by its arguments. Tools: bash, read_file, write_file,
edit_file and submit. Observations are truncated, turns are limited, and every
step is appended to a JSON-lines trajectory so the host can compare what the
model asked for with what ran.
"""
import argparse
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

SYSTEM_PROMPT = """You are a careful software engineer working in a git repository at /workspace.
Fix the task described by the user. Use the tools to look around, change files and run tests.
Make the smallest change that solves the task. When you are done, call `submit`."""


def tool(name, description, properties, required):
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required}}}


TOOLS = [
    tool("bash", "Run a bash command in /workspace; returns exit code and output.",
         {"command": {"type": "string"}}, ["command"]),
    tool("read_file", "Read a text file.", {"path": {"type": "string"}}, ["path"]),
    tool("write_file", "Create or overwrite a file with the given content.",
         {"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"]),
    tool("edit_file", "Replace exactly one occurrence of old_str with new_str in a file.",
         {"path": {"type": "string"}, "old_str": {"type": "string"}, "new_str": {"type": "string"}},
         ["path", "old_str", "new_str"]),
    tool("submit", "Finish: the work in /workspace is the answer.", {}, []),
]


def truncate(text, limit):
    """Keeps the head and the tail: errors usually sit at the end of an output."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters cut ...]\n{text[-half:]}"


def run_tool(name, args, limits):
    if name == "bash":
        try:
            p = subprocess.run(["bash", "-c", args["command"]], cwd="/workspace", capture_output=True,
                               text=True, errors="replace", timeout=limits.command_timeout)
            return f"exit code {p.returncode}\n{p.stdout}{p.stderr}"
        except subprocess.TimeoutExpired:
            return f"timed out after {limits.command_timeout}s"
    if name == "read_file":
        with open(args["path"], encoding="utf-8", errors="replace") as f:
            return f.read()
    if name == "write_file":
        os.makedirs(os.path.dirname(os.path.abspath(args["path"])), exist_ok=True)
        with open(args["path"], "w", encoding="utf-8") as f:
            f.write(args["content"])
        return f"wrote {len(args['content'])} characters to {args['path']}"
    if name == "edit_file":
        with open(args["path"], encoding="utf-8") as f:
            text = f.read()
        count = text.count(args["old_str"])
        if count != 1:
            return f"error: old_str occurs {count} times in {args['path']}; it must occur exactly once"
        with open(args["path"], "w", encoding="utf-8") as f:
            f.write(text.replace(args["old_str"], args["new_str"], 1))
        return f"edited {args['path']}"
    return f"error: unknown tool {name!r}"


def chat(url, secret, model, messages, timeout):
    body = json.dumps({"model": model, "messages": messages, "tools": TOOLS}).encode()
    req = urllib.request.Request(url + "/chat/completions", data=body, headers={
        "content-type": "application/json", "authorization": f"Bearer {secret}"})
    with urllib.request.urlopen(req, timeout=timeout) as res:
        return json.loads(res.read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True, help="OpenAI base URL of the proxy session (ends in /v1)")
    ap.add_argument("--secret-file", required=True)
    ap.add_argument("--model", default="policy")
    ap.add_argument("--instruction-file", required=True)
    ap.add_argument("--trajectory", required=True, help="JSON-lines file of every turn and tool call")
    ap.add_argument("--max-turns", type=int, default=30)
    ap.add_argument("--max-observation-chars", type=int, default=10000)
    ap.add_argument("--command-timeout", type=int, default=120)
    ap.add_argument("--request-timeout", type=int, default=600)
    limits = ap.parse_args()
    secret = open(limits.secret_file).read().strip()
    instruction = open(limits.instruction_file, encoding="utf-8").read()
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": instruction}]
    log = open(limits.trajectory, "a", encoding="utf-8")

    def record(event):
        log.write(json.dumps(event) + "\n")
        log.flush()

    for turn in range(limits.max_turns):
        try:
            reply = chat(limits.base_url, secret, limits.model, messages, limits.request_timeout)
        except urllib.error.HTTPError as e:
            record({"event": "model_error", "turn": turn, "status": e.code, "body": e.read().decode(errors="replace")[:2000]})
            return 3
        choice = reply["choices"][0]
        msg = choice["message"]
        calls = msg.get("tool_calls") or []
        record({"event": "turn", "turn": turn, "content": msg.get("content"), "finish_reason": choice.get("finish_reason"),
                "tool_calls": [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in calls]})
        messages.append({"role": "assistant", "content": msg.get("content"), **({"tool_calls": calls} if calls else {})})
        if not calls:
            record({"event": "end", "reason": "answer", "final": msg.get("content")})
            return 0
        for c in calls:
            name = c["function"]["name"]
            if name == "submit":
                record({"event": "end", "reason": "submit", "final": msg.get("content")})
                return 0
            try:
                args = json.loads(c["function"]["arguments"] or "{}")
                output = run_tool(name, args, limits)
            except (OSError, KeyError, TypeError, ValueError) as e:
                output = f"error: {type(e).__name__}: {e}"
            record({"event": "tool", "turn": turn, "name": name, "arguments": c["function"]["arguments"], "output": output[:2000]})
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": truncate(output, limits.max_observation_chars)})
    record({"event": "end", "reason": "turn_limit"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
