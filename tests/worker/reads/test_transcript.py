"""A session's rows cut into turns: requests, calls and results, nudges, diffs, verdicts."""

from __future__ import annotations

from typing import Any

from worker.reads.conversation import Recorded, build_turns


def _model(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"role": "model", "parts": list(parts)}, "finish_reason": "STOP"}


def _usage(turn_no: int, prompt: int) -> dict[str, Any]:
    return {
        "turn_no": turn_no,
        "model": "sim",
        "prompt_tokens": prompt,
        "cached_tokens": 0,
        "output_tokens": 10,
        "thoughts_tokens": 5,
        "tool_use_tokens": 0,
        "cost_usd": 0.001,
        "latency_ms": 12,
    }


def test_rows_become_turns_with_their_calls_diffs_nudges_and_verdicts() -> None:
    # Given a session that thought aloud, created a page, got a nudge, handed off, was
    # judged, and whose log holds an event this version cannot read
    brief = {"content": {"role": "user", "parts": [{"text": "Build it."}]}}
    create = {"name": "manage_artifact", "args": {"action": "create", "content": "a\nb\n"}}
    recorded = Recorded(
        events=[
            (0, "brief", brief),
            (0, "model", _model({"text": "planning", "thought": True}, {"function_call": create})),
            (
                0,
                "tool_result",
                {"name": "manage_artifact", "response": {"output": {"version": 1}}},
            ),
            (0, "nudge", {"reason": "loop", "kind": "repeat", "content": brief["content"]}),
            (
                1,
                "model",
                _model(
                    {"text": "Done."}, {"function_call": {"id": "h", "name": "handoff", "args": {}}}
                ),
            ),
            (
                1,
                "tool_result",
                {
                    "name": "handoff",
                    "call_id": "h",
                    "response": {
                        "output": {"status": "handed_off", "artifact_name": "p.html", "version": 1}
                    },
                },
            ),
            (1, "tool_error", {"name": "plan_manage"}),
        ],
        usage=[_usage(0, 1000), _usage(1, 1300)],
        versions=[
            {
                "id": 7,
                "name": "p.html",
                "version": 1,
                "turn_no": 0,
                "content": "a\nb\n",
                "sha256": "x",
                "size_bytes": 4,
            }
        ],
        verdicts=[
            {
                "id": 3,
                "round": 0,
                "artifact_version_id": 7,
                "passed": True,
                "method": "static",
                "checks": [{"name": "size", "passed": True, "detail": "small"}],
                "fps": None,
                "elapsed_ms": 4,
                "has_screenshot": False,
                "has_video": False,
            }
        ],
    )
    # When it is cut into turns
    first, second = build_turns(recorded)
    # Then turn 0 holds the brief, the thought, the call with its result (matched by name,
    # having no id), the new page as a diff, and the nudge after the call
    assert [m.kind for m in first.request] == ["brief"] and first.thoughts == ["planning"]
    (call,) = first.tool_calls
    assert (call.name, call.ok, call.output) == ("manage_artifact", True, {"version": 1})
    (version,) = first.versions
    assert (version.previous, version.diff, version.added) == (
        None,
        ["--- /dev/null", "+++ p.html v1", "@@ -0,0 +1,2 @@", "+a", "+b"],
        2,
    )
    assert [(m.kind, m.reason) for m in first.nudges] == [("nudge", "loop: repeat")]
    # and turn 1 the text, the handoff matched by its id, the verdict on what it handed off,
    # the unreadable event as stored, and the prompt tokens new since turn 0
    assert second.text == "Done." and second.results_sent == 1
    assert [c.name for c in second.tool_calls] == ["handoff"]
    (verdict,) = second.verdicts
    assert (verdict.name, verdict.version, verdict.checks[0].detail) == ("p.html", 1, "small")
    assert [(m.kind, m.reason) for m in second.nudges] == [("unreadable", "tool_error")]
    assert second.usage is not None and second.usage.new_prompt_tokens == 300
    # and a long argument is shown cut, with its length
    args, sizes = call.shortened(2)
    assert (args["content"], sizes["content"]) == ("a…", 4)
