"""textkit: write one small text function; hidden tests judge it in Swarm's sandbox.

A complete Swarm task in one file, to copy: its instances (public fields the agent may see,
hidden ones only the verifier reads), the instructions and the starting file, the hidden
test, the reference solution, and a tool of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from worker.errors import ToolError
from worker.tasks import (
    Artifact,
    HiddenTest,
    Instance,
    Task,
    TaskTool,
    ToolArgs,
    VerifierKind,
    Workspace,
)

#: Each problem: the function's stub, its reference body, its hidden test, public examples.
PROBLEMS: dict[str, dict[str, Any]] = {
    "slugify": {
        "stub": (
            "def slugify(title: str) -> str:\n"
            '    """Lower-case words of title joined by "-"; only letters and digits kept."""\n'
        ),
        "body": ("    import re\n    return '-'.join(re.findall(r'[a-z0-9]+', title.lower()))\n"),
        "test": (
            "from solution import slugify\n"
            "assert slugify('Hello, World!') == 'hello-world'\n"
            "assert slugify('  Many   spaces  ') == 'many-spaces'\n"
            "assert slugify('C3PO & R2D2') == 'c3po-r2d2'\n"
            "assert slugify('') == ''\n"
        ),
        "examples": ["slugify('Hello, World!') == 'hello-world'"],
    },
    "word_count": {
        "stub": (
            "def word_count(text: str) -> dict[str, int]:\n"
            '    """How often each lower-cased word (letters, apostrophes) occurs in text."""\n'
        ),
        "body": (
            "    import re\n"
            "    counts: dict[str, int] = {}\n"
            '    for word in re.findall(r"[a-z\']+", text.lower()):\n'
            "        counts[word] = counts.get(word, 0) + 1\n"
            "    return counts\n"
        ),
        "test": (
            "from solution import word_count\n"
            "assert word_count('a b a') == {'a': 2, 'b': 1}\n"
            "assert word_count(\"Don't stop, don't!\") == {\"don't\": 2, 'stop': 1}\n"
            "assert word_count('') == {}\n"
        ),
        "examples": ["word_count('a b a') == {'a': 2, 'b': 1}"],
    },
    "balanced": {
        "stub": (
            "def balanced(text: str) -> bool:\n"
            '    """True when every (, [ and { in text is closed, in order."""\n'
        ),
        "body": (
            "    pairs, stack = {')': '(', ']': '[', '}': '{'}, []\n"
            "    for ch in text:\n"
            "        if ch in '([{':\n"
            "            stack.append(ch)\n"
            "        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):\n"
            "            return False\n"
            "    return not stack\n"
        ),
        "test": (
            "from solution import balanced\n"
            "assert balanced('([]{})') is True\n"
            "assert balanced('([)]') is False\n"
            "assert balanced('((') is False\n"
            "assert balanced('no brackets') is True\n"
        ),
        "examples": ["balanced('([]{})') is True"],
    },
}


class Examples(ToolArgs):
    """Show worked examples of the function you are writing."""

    count: int = 1
    """How many examples to show (1 to 3)."""


def examples(args: Examples, workspace: Workspace) -> dict[str, Any]:
    """The instance's public examples; refuses a count out of range."""
    if not 1 <= args.count <= 3:
        raise ToolError("count must be 1 to 3", kind="bad_arguments", hint="ask for 1 to 3")
    return {"examples": list(workspace.public["examples"])[: args.count]}


class TextKit(Task):
    """Write one small text function in solution.py; hidden tests judge it."""

    name = "textkit"
    version = "1"
    verifier = VerifierKind.python
    artifacts = (Artifact("solution.py", "text/x-python", 8_192),)
    role = "You are a Python engineer. You write one small, correct function."

    def instances(self) -> Sequence[Instance]:
        return [
            Instance(
                name,
                public={"function": name, "stub": p["stub"], "examples": p["examples"]},
                hidden={"test": p["test"], "body": p["body"]},
            )
            for name, p in PROBLEMS.items()
        ]

    def instructions(self, instance: Instance) -> str:
        return (
            f"Write the function {instance.public['function']} in solution.py as its "
            "docstring says (the file starts with its stub, at version 0), then hand off "
            "solution.py. The examples tool shows worked examples."
        )

    def files(self, instance: Instance) -> Mapping[str, str]:
        return {"solution.py": instance.public["stub"]}

    def tools(self) -> Sequence[TaskTool]:
        return [TaskTool("examples", Examples, examples)]

    def hidden_test(self, instance: Instance) -> HiddenTest:
        return HiddenTest(module="solution.py", source=instance.hidden["test"])

    def solution(self, instance: Instance) -> Mapping[str, str]:
        return {"solution.py": instance.public["stub"] + instance.hidden["body"]}


task = TextKit()
