#!/usr/bin/env bash
# Builds the Python harness runtimes that agent containers bind-mount read-only
# (called by build-runtimes.sh; see docs/harnesses.md, "Python runtime"):
#   OUT/python/          a copy of a CPython 3.12.1 prefix: the OpenHands SDK needs
#                        >= 3.12 and the base image (Debian bookworm) has 3.11
#   OUT/openhands/       openhands-sdk + openhands-tools, `pip install --target`
#   OUT/mini-swe-agent/  mini-swe-agent, `pip install --target`
# Both package sets are installed --no-deps from python-locks/NAME.txt (every
# package pinned), each into its own folder: their litellm pins differ.
# Inside a container run them as
#   LD_LIBRARY_PATH=/opt/lego-runtimes/python/lib PYTHONPATH=/opt/lego-runtimes/NAME \
#     /opt/lego-runtimes/python/bin/python3 …
# (the prefix links libpython by its build-time path; console-script shebangs
# name host paths, so drivers are run as files or with -m).
#
# Where the CPython comes from: the machine image's pyenv build of 3.12.1
# (~/.pyenv/versions/3.12.1, present on every machine of this project's kind,
# beside the 3.11.7 that is its python3). No CPython build is reachable from
# here otherwise (no python.org, no GitHub: uv/pyenv downloads fail; Debian
# bookworm has no 3.12). --python-prefix PREFIX names another 3.12.1 prefix.
#
# OUT/python-runtimes.stamp holds a digest of the pins (CPython version, both
# locks, this script); `$0 OUT --check` exits 0 when it matches and the
# runtimes are there, which is how build-runtimes.sh --check skips the build.
set -euo pipefail

PYTHON_VERSION=3.12.1
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
locks="$here/python-locks"

usage() { echo "usage: $0 OUT_DIR [--check | --python-prefix PREFIX]" >&2; exit 2; }
die() { echo "build-python-runtimes: error: $*" >&2; exit 1; }
[ $# -ge 1 ] || usage
out="$(realpath -m "$1")"; shift
prefix=""
check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --python-prefix) [ $# -ge 2 ] || usage; prefix="$2"; shift 2 ;;
    --check) check=1; shift ;;
    *) usage ;;
  esac
done

want_stamp() {
  { echo "python $PYTHON_VERSION"; sha256sum "$locks/openhands.txt" "$locks/mini-swe-agent.txt" "$here/build-python-runtimes.sh" | cut -d' ' -f1; } | sha256sum | cut -d' ' -f1
}

if [ "$check" = 1 ]; then
  [ "$(cat "$out/python-runtimes.stamp" 2>/dev/null)" = "$(want_stamp)" ] &&
    [ -x "$out/python/bin/python3" ] && [ -d "$out/openhands/openhands/sdk" ] && [ -d "$out/mini-swe-agent/minisweagent" ]
  exit
fi

if [ -z "$prefix" ]; then
  if command -v pyenv >/dev/null && pyenv prefix "$PYTHON_VERSION" >/dev/null 2>&1; then
    prefix="$(pyenv prefix "$PYTHON_VERSION")"
  else
    prefix="$HOME/.pyenv/versions/$PYTHON_VERSION"
  fi
fi
[ -x "$prefix/bin/python3" ] || die "no CPython $PYTHON_VERSION at $prefix (pass --python-prefix PREFIX)"
have="$("$prefix/bin/python3" -c 'import platform; print(platform.python_version())')"
[ "$have" = "$PYTHON_VERSION" ] || die "$prefix is CPython $have, not the pinned $PYTHON_VERSION"
# ssl and sqlite3 are what litellm/httpx and the SDK's stores import first; a
# prefix built without them fails here, not inside a rollout.
"$prefix/bin/python3" -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib' || die "$prefix lacks a standard extension module"

rm -f "$out/python-runtimes.stamp"
rm -rf "$out/python" "$out/openhands" "$out/mini-swe-agent"
mkdir -p "$out"
cp -a "$prefix" "$out/python"
# Byte-code of the copied stdlib is kept; a read-only mount cannot add any.
for name in openhands mini-swe-agent; do
  "$out/python/bin/python3" -m pip install -q --disable-pip-version-check --no-warn-script-location \
    --root-user-action=ignore --no-deps --prefer-binary --target "$out/$name" -r "$locks/$name.txt"
  # Compiled once here: the mount is read-only, so the agent could not cache it.
  "$out/python/bin/python3" -m compileall -q -j 0 "$out/$name" >/dev/null || true
done
chmod -R a+rX "$out/python" "$out/openhands" "$out/mini-swe-agent"

run() { LITELLM_LOCAL_MODEL_COST_MAP=True OPENHANDS_SUPPRESS_BANNER=1 LD_LIBRARY_PATH="$out/python/lib" PYTHONPATH="$out/$1" "$out/python/bin/python3" -c "$2"; }
run openhands 'import importlib.metadata as m, openhands.sdk, openhands.tools.terminal, openhands.tools.file_editor; print("openhands-sdk", m.version("openhands-sdk"))'
run mini-swe-agent 'import importlib.metadata as m, minisweagent.agents.default, minisweagent.models.litellm_model; print("mini-swe-agent", m.version("mini-swe-agent"))'
echo "CPython $PYTHON_VERSION from $prefix: libpython sha256 $(sha256sum "$out/python/lib/libpython3.12.so.1.0" | cut -d' ' -f1)"
# Last: a build that failed above leaves no stamp, so set-up tries again.
want_stamp > "$out/python-runtimes.stamp"
