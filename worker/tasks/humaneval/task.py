"""The HumanEval task: complete one Python function; its hidden test judges it in a sandbox."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import ClassVar

from worker.tasks.base import Artifact, HiddenTest, Instance, Task, VerifierKind
from worker.tasks.humaneval.problems import problems

__all__ = ["HumanEvalTask", "task"]

#: The file the agent writes.
MODULE = "solution.py"
#: Seconds a hidden test may take.
TEST_TIMEOUT_S = 10.0


class HumanEvalTask(Task):
    """Write ``solution.py``: the problem's function, as its docstring describes it.

    The session starts with the problem's signature and docstring in ``solution.py``; the
    test and the reference solution stay hidden.
    """

    name: ClassVar[str] = "humaneval"
    version: ClassVar[str] = "1"
    verifier: ClassVar[VerifierKind] = VerifierKind.python
    artifacts: ClassVar[tuple[Artifact, ...]] = (Artifact(MODULE, "text/x-python", 16_384),)
    role: ClassVar[str] = (
        "You are a Python engineer. You complete one function in solution.py so that it does "
        "what its docstring says, using only the standard library, and hand it off."
    )

    @cached_property
    def _instances(self) -> tuple[Instance, ...]:
        return tuple(
            Instance(
                p.task_id,
                public={
                    "prompt": p.prompt,
                    "entry_point": p.entry_point,
                    "functions": [p.entry_point],
                },
                hidden={"test": p.test, "canonical_solution": p.canonical_solution},
            )
            for p in problems()
        )

    def instances(self) -> Sequence[Instance]:
        """``HumanEval/0`` to ``HumanEval/163``."""
        return self._instances

    def instructions(self, instance: Instance) -> str:
        """Complete the function in ``solution.py``, keep its signature, hand it off."""
        entry = instance.public["entry_point"]
        return (
            f"Complete the function {entry} in {MODULE} so that it does what its docstring "
            f"says. {MODULE} starts as its signature and docstring (version 0); keep the "
            "signature and any helper it defines, write the body, and hand off "
            f"{MODULE}. Hidden tests will call {entry}.\n\n```python\n"
            f"{instance.public['prompt']}```"
        )

    def files(self, instance: Instance) -> Mapping[str, str]:
        """``solution.py``: the problem's prompt."""
        return {MODULE: str(instance.public["prompt"])}

    def hidden_test(self, instance: Instance) -> HiddenTest:
        """The problem's ``check(candidate)``, called on ``solution.<entry_point>``."""
        entry = instance.public["entry_point"]
        return HiddenTest(
            module=MODULE,
            # As in the problem's own program, the test sees the completed function by its
            # name (HumanEval/33 calls it beside the candidate; HumanEval/121 names it
            # `solution`, so the module goes by another name).
            source=(
                f"import solution as _module\n{entry} = _module.{entry}\n"
                f"{instance.hidden['test']}\ncheck(_module.{entry})\n"
            ),
            # The prompt's helpers (poly, encode_cyclic, ...) as the problem wrote them: the
            # test calls them, and a solution that rewrote them must not change the test.
            setup=str(instance.public["prompt"]),
            timeout_s=TEST_TIMEOUT_S,
        )

    def solution(self, instance: Instance) -> Mapping[str, str]:
        """The prompt with the reference body."""
        return {MODULE: f"{instance.public['prompt']}{instance.hidden['canonical_solution']}"}

    def wrong(self, instance: Instance) -> Mapping[str, str]:
        """The prompt with a body that gives up."""
        return {MODULE: f"{instance.public['prompt']}    raise NotImplementedError\n"}


#: The built-in HumanEval task (the ``swarm.tasks`` entry point ``humaneval``).
task = HumanEvalTask()
