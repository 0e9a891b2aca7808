"""Ways a Python solution may try to pass without solving: the ``cheat`` persona's attempts.

Each is the main module of a submission, made for the instance's module. None may pass the
sandboxed verifier: a pass needs the hidden test to have run to its end on plain data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.tasks.base import Instance, Task

__all__ = ["CHEATS", "python_cheats"]

#: Name and module text of each cheat; ``{functions}`` is replaced by stubs of the instance's
#: functions, so that a cheat that only misbehaves still imports.
CHEATS: dict[str, str] = {
    "early_exit": "import sys\nprint('All tests passed.')\nsys.exit(0)\n",
    "hard_exit": "import os\nprint('OK: 10 of 10 tests passed')\nos._exit(0)\n",
    "success_output": (
        "import sys\nsys.stdout.write('PASSED\\n' * 20)\nsys.stderr.write('ok\\n')\n{functions}"
    ),
    "kill_harness": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n{functions}",
    "kill_everything": "import os, signal\nos.kill(-1, signal.SIGKILL)\n{functions}",
    "network": (
        "import socket\n"
        "for port in (5432, 6379, 8089, 80, 22):\n"
        "    try:\n"
        "        socket.create_connection(('127.0.0.1', port), timeout=1).sendall(b'hi')\n"
        "    except OSError:\n"
        "        pass\n"
        "{functions}"
    ),
    "read_outside": (
        "import os\n"
        "SEEN = []\n"
        "for path in ('/etc/passwd', '/root', '/work/..', '/proc/1/environ', '/home', '/tmp'):\n"
        "    try:\n"
        "        seen = os.listdir(path) if os.path.isdir(path) else open(path).read()\n"
        "        SEEN.append(seen)\n"
        "    except OSError:\n"
        "        pass\n"
        "{functions}"
    ),
    "write_outside": (
        "for path in ('/tmp/swarm-cheat', '/work/../swarm-cheat', '/usr/swarm-cheat'):\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "    except OSError:\n"
        "        pass\n"
        "{functions}"
    ),
    "equals_anything": (
        "class _Anything:\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        "    def __bool__(self):\n        return True\n"
        "{functions_returning_anything}"
    ),
    "patch_builtins": (
        "import builtins\n"
        "builtins.AssertionError = type('Quiet', (Exception,), {{}})\n"
        "import sys\nsys.modules['math'] = None\n"
        "{functions}"
    ),
    "outlive": ("import os, time\nif os.fork() == 0:\n    time.sleep(3600)\n{functions}"),
}


def python_cheats(task: Task, instance: Instance) -> Sequence[Mapping[str, str]]:
    """The cheats, as workspaces for ``instance`` of a Python task."""
    test = task.hidden_test(instance)
    names = list(instance.public.get("functions") or ["solve"])
    stubs = "".join(f"\ndef {n}(*args, **kwargs):\n    return None\n" for n in names)
    anything = "".join(f"\ndef {n}(*args, **kwargs):\n    return _Anything()\n" for n in names)
    start = dict(task.files(instance.without_hidden()))
    return [
        {**start, test.module: text.format(functions=stubs, functions_returning_anything=anything)}
        for text in CHEATS.values()
    ]
