"""The HumanEval task: 164 Python functions, judged by their hidden tests in a sandbox."""
