#!/usr/bin/env bash
# Builds ts/native/build/mapped-file.node (the sender's spool-file mapping; see
# mapped-file.c) with the system C compiler against node-api-headers. Node-API
# is ABI-stable, so no Node headers download is needed. Prints one line; exits
# 0 without a compiler (the sender then falls back to write()).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/build/mapped-file.node"
src="$here/mapped-file.c"
headers="$(cd "$here/.." && node -p 'require("node-api-headers").include_dir')"
cc="${CC:-cc}"
if [ -f "$out" ] && [ "$out" -nt "$src" ]; then
  echo "native spool mapping up to date ($out)"
  exit 0
fi
if ! command -v "$cc" >/dev/null; then
  echo "no C compiler ($cc): the sender will write spool files with write() (one more copy per batch)"
  exit 0
fi
mkdir -p "$here/build"
"$cc" -O2 -Wall -Wextra -shared -fPIC -I "$headers" "$src" -o "$out.tmp"
mv "$out.tmp" "$out"
echo "built the native spool mapping ($out)"
