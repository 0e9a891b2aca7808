"""What the runtime tells the agent in words: the verifier's findings and its warnings.

A leaf, so that the turn loop that sends these and the sim players that read them share one
wording.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FEEDBACK_OPENING", "LOOP_HINT", "NO_CALL_NOTICE", "feedback_text", "user_text"]

#: How every loop warning of the runtime begins its advice (see ``worker.agent.limits``).
LOOP_HINT = "Next: publish the work"
#: How the verifier's findings open when they are sent back to the agent.
FEEDBACK_OPENING = "The verifier rejected the artifact"
#: What the agent is told when it answers without calling a tool.
NO_CALL_NOTICE = (
    "No tool was called. Text answers are not read: write your files with "
    'manage_artifact(action="create") or edit them, then call handoff.'
)


def feedback_text(checks: list[dict[str, Any]], *, round_no: int, rounds: int) -> str:
    """The verifier's findings as the agent's next user message."""
    lines = [f"- {c['name']}: {c['detail']}" for c in checks if not c.get("passed")]
    return (
        f"{FEEDBACK_OPENING} (repair round {round_no + 1} of {rounds}). "
        "Findings:\n"
        + "\n".join(lines)
        + '\nRepair the same artifact in place with manage_artifact(action="edit", '
        "expected_version=...) and hand it off again."
    )


def user_text(text: str) -> dict[str, Any]:
    """A user message carrying plain text (runtime notices, verifier findings)."""
    return {"role": "user", "parts": [{"text": text}]}
