"""The verdict on Python files: the instance's hidden test, run in the sandbox to its end.

A pass needs the harness's report, carrying the run's nonce, saying that the hidden test ran
to its end. What the agent is told on a failure is the first failure as the test met it (the
exception, and the last call into the solution with what it gave back), or the solution's own
traceback: never a line of the hidden test.
"""

from __future__ import annotations

from verifier.sandbox.bubblewrap import Run, Sandbox
from verifier.verdict import Verdict
from worker.errors import SandboxUnavailable
from worker.tasks.base import Check, HiddenTest, Submission

__all__ = ["HIDDEN_TEST", "judge_python"]

#: The check a hidden test gives.
HIDDEN_TEST = "hidden_test"
#: Longest detail sentence, in characters.
MAX_DETAIL = 1500


def judge_python(submission: Submission, test: HiddenTest, *, sandbox: Sandbox) -> Verdict:
    """Run ``test`` on ``submission``'s files in ``sandbox``.

    Raises:
        SandboxUnavailable: the sandbox did not start; nothing was judged.
    """
    if test.module not in submission.files:
        check = Check(
            HIDDEN_TEST,
            False,
            {"calls": 0},
            f"There is no {test.module} in the workspace: the hidden test imports it. "
            f"Create {test.module} and hand it off.",
        )
        return Verdict(passed=False, checks=[check], fps=None, sandbox=True)
    run = sandbox.run(
        submission.files,
        {"module": test.module, "setup": test.setup, "source": test.source},
        timeout_s=test.timeout_s,
    )
    if not run.ready:
        raise SandboxUnavailable(
            f"the sandbox did not start (exit {run.exit_code}): "
            f"{run.output.strip().splitlines()[-1] if run.output.strip() else 'no output'}"
        )
    check = _hidden_test(run, test)
    return Verdict(passed=check.passed, checks=[check], fps=None, sandbox=True)


def _hidden_test(run: Run, test: HiddenTest) -> Check:
    report = run.report
    value = {
        "calls": (report or {}).get("calls", 0),
        "wall_s": round(run.wall_s, 3),
        "cpu_s": round(run.cpu_s, 3),
    }
    if report is not None and report.get("passed") is True:
        return Check(
            HIDDEN_TEST,
            True,
            value,
            f"The hidden test ran to its end ({value['calls']} calls into {test.module}).",
        )
    if run.timed_out:
        detail = (
            f"The hidden test did not finish within {test.timeout_s:g} s: make {test.module} "
            "return sooner (no endless loop, no waiting on input)."
        )
    elif report is None:
        detail = (
            "The hidden test did not run to its end: the sandbox ended "
            f"(exit {run.exit_code}) before it reported. A solution must not exit, kill "
            "or outlive the test; only its functions' results count."
        )
    elif report.get("stage") == "import":
        detail = f"{report.get('detail', 'importing the solution failed')}."
    else:
        detail = _failure(report)
    return Check(HIDDEN_TEST, False, value, _trim(detail))


def _failure(report: dict[str, object]) -> str:
    error = str(report.get("error") or "the hidden test failed")
    last = report.get("last")
    if not isinstance(last, dict):
        return f"The hidden test failed before calling the solution: {error}."
    call = last.get("call")
    if "returned" in last:
        return (
            f"A hidden check failed ({error.splitlines()[-1]}) after {call} returned "
            f"{last['returned']}."
        )
    if "raised" in last:
        return f"{call} raised:\n{last['raised']}"
    if "ended" in last:
        return f"The solution's process ended during {call}: {last['ended']}."
    return f"The hidden test failed: {error}."


def _trim(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."
