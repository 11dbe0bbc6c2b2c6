#!/usr/bin/env bash
# Builds the harness runtimes that agent containers bind-mount read-only
# (RuntimeMount in ts/src/sandbox/agent-sandbox.ts), so task images stay pure
# and no container needs the network:
#   OUT/node/bin/node        this host's Node binary (Debian bookworm host and
#                            base image share glibc, so it runs unchanged)
#   OUT/harness/             npm packages: Claude Code, OpenCode, Codex CLI (pinned below);
#                            OUT/harness/bin/rg is the ripgrep Codex ships (OpenCode
#                            downloads one at start when none is on PATH)
#   OUT/python/, OUT/openhands/, OUT/mini-swe-agent/
#                            CPython 3.12.1 and the Python harnesses, built by
#                            build-python-runtimes.sh [--with-openhands PREFIX:
#                            the CPython prefix to copy, default pyenv's 3.12.1]
# Mount them as RuntimeMount {name: "node" | "harness" | …, hostPath: OUT/<name>};
# inside they are /opt/lego-runtimes/<name>.
# OUT/manifest.json records the pinned versions built there (other keys are kept);
# `$0 OUT --check` exits 0 when it matches these pins, which is how scripts/setup
# skips the build (minutes, ~1.5 GB) when the cache is current.
set -euo pipefail

CLAUDE_CODE_VERSION="${CLAUDE_CODE_VERSION:-2.1.332}"
OPENCODE_VERSION="${OPENCODE_VERSION:-1.18.33}"
CODEX_VERSION="${CODEX_VERSION:-0.171.0}"

usage() { echo "usage: $0 OUT_DIR [--check | --with-openhands PYTHON_PREFIX]" >&2; exit 2; }
[ $# -ge 1 ] || usage
out="$(realpath -m "$1")"; shift
py_prefix=""
check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --with-openhands) [ $# -ge 2 ] || usage; py_prefix="$2"; shift 2 ;;
    --check) check=1; shift ;;
    *) usage ;;
  esac
done

# Reads or updates OUT/manifest.json (node is what set-up and the build already need).
manifest() {
  MANIFEST="$out/manifest.json" CLAUDE_CODE_VERSION="$CLAUDE_CODE_VERSION" OPENCODE_VERSION="$OPENCODE_VERSION" CODEX_VERSION="$CODEX_VERSION" node -e '
    const fs = require("fs");
    const path = process.env.MANIFEST;
    const want = { "claude-code": process.env.CLAUDE_CODE_VERSION, opencode: process.env.OPENCODE_VERSION, codex: process.env.CODEX_VERSION };
    let have = {};
    try { have = JSON.parse(fs.readFileSync(path, "utf8")); } catch {}
    if (process.argv[1] === "check") process.exit(Object.entries(want).every(([k, v]) => have[k] === v) ? 0 : 1);
    fs.writeFileSync(path, JSON.stringify({ ...have, ...want, node: process.version }, null, 2) + "\n");
  ' "$1"
}

if [ "$check" = 1 ]; then
  manifest check && [ -x "$out/harness/node_modules/@anthropic-ai/claude-code-linux-x64/claude" ] && [ -x "$out/harness/bin/rg" ] && [ -x "$out/node/bin/node" ] &&
    "$(dirname "$0")/build-python-runtimes.sh" "$out" --check
  exit
fi

mkdir -p "$out/node/bin" "$out/harness"
install -m 0755 "$(command -v node)" "$out/node/bin/node"

# Claude Code's postinstall links its platform binary (from an optional
# dependency), so scripts must run; OpenCode works without its own.
npm install --prefix "$out/harness" --no-audit --no-fund \
  "@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}" "opencode-ai@${OPENCODE_VERSION}" "@openai/codex@${CODEX_VERSION}"
mkdir -p "$out/harness/bin"
ln -sfn ../node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/codex-path/rg "$out/harness/bin/rg"

# CPython 3.12.1 with the OpenHands SDK and mini-swe-agent (own pins and stamp).
"$(dirname "$0")/build-python-runtimes.sh" "$out" ${py_prefix:+--python-prefix "$py_prefix"}

chmod -R a+rX "$out"
echo "runtimes in $out:"
"$out/harness/node_modules/.bin/claude" --version
"$out/harness/node_modules/.bin/opencode" --version
"$out/harness/node_modules/.bin/codex" --version
"$out/harness/bin/rg" --version | head -1
# Last: a build that failed above leaves the manifest as it was, so set-up tries again.
manifest write
