"""`python -m lego_rl.schema.inspect FILE...`: decode, validate and summarise Arrow batch files.

Prints one line per trajectory (status, reward, segments, tokens, trainable
tokens) and the routing view shape, and exits 1 naming the file if any batch
fails validation.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from .arrow_codec import batch_records, decode_batch
from .errors import SchemaError
from .validate import trainable_problems


def summarize(path: Path) -> list[str]:
    decoded = decode_batch(pa.memory_map(str(path)).read_buffer())
    lines = [f"{path.name}: {decoded.batch.num_rows} {decoded.record} row(s), schema {decoded.schema_version}, "
             f"routing {decoded.routing or 'dense'}"]
    if decoded.record != "Trajectory":
        return lines
    for trajectory in batch_records(decoded):
        tokens = sum(s.token_ids.size for s in trajectory.segments)
        trainable = sum(int(s.loss_mask.sum()) for s in trajectory.segments)
        routed = [decoded.routing.view(s.routing).shape for s in trajectory.segments if s.routing is not None and decoded.routing]
        reward = "-" if trajectory.reward is None else f"{trajectory.reward:g}"
        lines.append(
            f"  {trajectory.trajectory_id} [{trajectory.harness}] {trajectory.status} reward={reward} "
            f"segments={len(trajectory.segments)} tokens={tokens} trainable={trainable} routing_views={routed}"
        )
    problems = trainable_problems(decoded.batch)
    lines.append("  may train: yes" if not problems else f"  may train: no ({'; '.join(problems)})")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lego_rl.schema.inspect", description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    failed = 0
    np.set_printoptions(linewidth=120)
    for path in args.files:
        try:
            print("\n".join(summarize(path)))
        except (SchemaError, OSError) as error:
            failed += 1
            print(f"{path}: INVALID: {error}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
