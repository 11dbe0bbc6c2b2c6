"""`python3 -m schemas.codegen [--check]`: write or verify the generated record code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .emit_py import emit_py
from .emit_ts import emit_ts
from .model import load_schema

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "schemas" / "records.toml"
TARGETS = {
    ROOT / "ts" / "src" / "schema" / "generated.ts": emit_ts,
    ROOT / "python-bridge" / "lego_rl" / "schema" / "generated.py": emit_py,
}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gen-schemas", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a generated file is stale; write nothing")
    args = parser.parse_args(argv)
    model = load_schema(SOURCE)
    stale = []
    for path, emit in TARGETS.items():
        text = emit(model)
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        rel = path.relative_to(ROOT)
        if args.check:
            stale.append(str(rel))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"gen-schemas: wrote {rel}")
    if stale:
        print(
            "gen-schemas: generated files are stale relative to schemas/records.toml: "
            + ", ".join(stale)
            + "\n  run scripts/gen-schemas and commit the result",
            file=sys.stderr,
        )
        return 1
    if args.check:
        print(f"gen-schemas: generated code matches schemas/records.toml (schema {model.version})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
