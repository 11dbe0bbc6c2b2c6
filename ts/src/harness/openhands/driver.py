"""Runs the OpenHands SDK agent, unmodified, headless on one task.

lego-rl's launch script for the SDK (which has no CLI of its own): an LLM
pointed at the proxy session as an OpenAI-compatible model, the SDK's own
terminal and file-editor tools, no condenser, no visualiser, the turn limit as
the conversation's iteration limit. Every event the SDK emits is written, one
JSON object a line, to --events (the harness's own trajectory).
Exit: 0 when the conversation ended on its own terms (finished, iteration
limit, stuck: its status is printed as JSON), 3 when run() raised (a failed
model call); the grader, not the exit, says whether it solved.
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
    p.add_argument("--events", required=True)
    p.add_argument("--max-turns", type=int, required=True)
    args = p.parse_args()

    from openhands.sdk import LLM, Agent, Conversation, Tool
    from openhands.tools.file_editor import FileEditorTool
    from openhands.tools.terminal import TerminalTool

    with open(args.secret_file) as f:
        secret = f.read().strip()
    with open(args.instruction_file) as f:
        instruction = f.read()

    llm = LLM(
        model=f"openai/{args.model}",
        base_url=args.base_url,
        api_key=secret,
        usage_id="agent",
        # A proxy error is ours to see, not to paper over with retries.
        num_retries=0,
    )
    agent = Agent(llm=llm, tools=[Tool(name=TerminalTool.name), Tool(name=FileEditorTool.name)])

    events = open(args.events, "w", buffering=1)

    def record(event) -> None:
        events.write(event.model_dump_json() + "\n")

    conversation = Conversation(
        agent=agent,
        workspace=os.getcwd(),
        max_iteration_per_run=args.max_turns,
        visualizer=None,
        callbacks=[record],
    )
    try:
        conversation.send_message(instruction)
        conversation.run()
    except Exception as e:  # the SDK raises its LLM errors out of run()
        print(f"openhands driver: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    finally:
        events.close()
    print(json.dumps({"execution_status": str(conversation.state.execution_status.value)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
