"""Runs mini-swe-agent, unmodified, headless on one task.

lego-rl's launch script: mini-swe-agent's own `mini.yaml` (its bash tool
through tool calls, its prompts and observation templates) with the proxy
session as an OpenAI-compatible litellm model, its non-interactive
DefaultAgent (the `mini` CLI's interactive agent asks for confirmation) and
LocalEnvironment in the working directory, the turn limit as its step limit.
Its trajectory is written to --trajectory.
Exit: 0 when the agent ended on its own terms (submitted, step limit,
repeated format errors: its exit status is printed as JSON), 3 when the run
raised (a failed model call); the grader, not the exit, says whether it solved.
"""

import argparse
import json
import os
import sys

# libpython is loaded by now; the agent's shells must not inherit our library path.
os.environ.pop("LD_LIBRARY_PATH", None)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL (…/v1)")
    p.add_argument("--secret-file", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--instruction-file", required=True)
    p.add_argument("--trajectory", required=True)
    p.add_argument("--max-turns", type=int, required=True)
    p.add_argument("--command-timeout", type=int, default=120)
    args = p.parse_args()

    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel
    from minisweagent.utils.serialize import recursive_merge

    with open(args.secret_file) as f:
        secret = f.read().strip()
    with open(args.instruction_file) as f:
        instruction = f.read()

    config = recursive_merge(
        get_config_from_spec("mini.yaml"),
        {
            "agent": {"step_limit": args.max_turns, "cost_limit": 0, "output_path": args.trajectory},
            "model": {
                "model_name": f"openai/{args.model}",
                "model_kwargs": {"api_base": args.base_url, "api_key": secret, "drop_params": True},
                # The served model has no price in litellm's map; cost is not ours to count.
                "cost_tracking": "ignore_errors",
            },
            "environment": {"cwd": os.getcwd(), "timeout": args.command_timeout},
        },
    )
    agent_config = {k: v for k, v in config["agent"].items() if k != "mode"}  # `mode` is the interactive agent's
    agent = DefaultAgent(LitellmModel(**config["model"]), LocalEnvironment(**config["environment"]), **agent_config)
    try:
        result = agent.run(instruction)
    except Exception as e:
        print(f"mini-swe-agent driver: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    print(json.dumps({"exit_status": result.get("exit_status", "")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
