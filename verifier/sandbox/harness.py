"""The program the sandbox runs: a hidden test against a solution kept in another process.

It runs inside bubblewrap with the standard library alone (``python3 -I -S -B``), from the
scratch directory that holds the session's files, and speaks to the verifier on two
channels: its standard input brings the secret part (a nonce and the hidden test), and
the descriptor its one argument names takes its report, which counts only when it carries
the nonce.

The solution never shares a process with the test. Before the secret is read, the harness
makes itself undumpable (no other process of its user may read its memory) and forks the
process that will import the solution; the test then calls the solution's functions across
a socket, and only plain data comes back (a restricted unpickler refuses every class but a
few built-in containers). So the solution cannot read the test or the nonce, cannot patch
what the test calls, cannot hand back an object that equals anything, and cannot write the
report: an early exit, a crash, output that looks like success or a kill of the harness (it
runs as the sandbox's PID 1, which ignores signals from inside) all leave the test
unfinished or the harness untouched, and an unfinished test is a failure.

This file is not imported by the project: it is bound read-only into the sandbox.
"""

import builtins
import ctypes
import io
import json
import os
import pickle
import signal
import socket
import struct
import sys
import traceback
import types
from contextlib import suppress
from typing import Any

#: Where the session's files are, inside the sandbox.
WORK = "/work"
#: Largest message either side accepts, in bytes.
MAX_MESSAGE = 16 * 1024 * 1024
#: Longest text of a value or a message quoted in a report.
MAX_QUOTE = 300
#: Built-in types a result may be made of beyond what pickle builds without a class.
_PLAIN = {"set", "frozenset", "complex", "bytearray", "range", "slice"}
#: What a result that is no plain data is called.
_NOT_PLAIN = "NotPlainData"

_PR_SET_DUMPABLE = 4


class _Plain(pickle.Unpickler):
    """Unpickles plain data only: no class but a few built-in containers."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _PLAIN:
            return getattr(builtins, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def _send(sock: socket.socket, message: object) -> None:
    data = pickle.dumps(message, protocol=5)
    sock.sendall(struct.pack(">I", len(data)) + data)


def _receive(sock: socket.socket, plain: bool) -> Any:
    head = _exactly(sock, 4)
    (size,) = struct.unpack(">I", head)
    if size > MAX_MESSAGE:
        raise EOFError(f"a message of {size} bytes")
    data = _exactly(sock, size)
    return _Plain(io.BytesIO(data)).load() if plain else pickle.loads(data)


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the channel closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _quote(value: object) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= MAX_QUOTE else text[: MAX_QUOTE - 3] + "..."


# -- the solution's side ---------------------------------------------------------------


def _solution_side(sock: socket.socket) -> None:
    """Import the solution when told which file it is, then answer calls until the end."""
    sys.dont_write_bytecode = True
    sys.path.insert(0, WORK)
    module_file = _receive(sock, plain=False)
    name = module_file[: -len(".py")] if module_file.endswith(".py") else module_file
    try:
        module = types.ModuleType(name)
        module.__file__ = os.path.join(WORK, module_file)
        sys.modules[name] = module
        with open(module.__file__, encoding="utf-8") as source:
            code = compile(source.read(), module.__file__, "exec")
        exec(code, module.__dict__)
    except BaseException as exc:  # the solution may raise anything, SystemExit included
        _send(sock, ("broken", _failure(exc)))
        return
    names: list[tuple[str, str, Any]] = []
    for key, value in list(vars(module).items()):
        if key.startswith("__"):
            continue
        if callable(value) and not isinstance(value, type):
            names.append((key, "function", None))
        else:
            try:
                names.append((key, "value", pickle.dumps(value, protocol=5)))
            except Exception:
                names.append((key, "other", type(value).__name__))
    _send(sock, ("loaded", names))
    while True:
        fn, args, kwargs = _receive(sock, plain=False)
        try:
            result = getattr(module, fn)(*args, **kwargs)
        except BaseException as exc:
            _send(sock, ("raised", type(exc).__name__, _failure(exc)))
            continue
        try:
            data = pickle.dumps(result, protocol=5)
        except Exception:
            _send(sock, ("raised", _NOT_PLAIN, f"returned a {type(result).__name__}"))
            continue
        _send(sock, ("returned", data))


def _failure(exc: BaseException) -> str:
    """The solution's own traceback: frames of its files only, trimmed."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(WORK)]
    lines = [f"{os.path.basename(f.filename)} line {f.lineno}, in {f.name}" for f in frames[-3:]]
    message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return "\n".join([*lines, message])[-1500:]


# -- the test's side --------------------------------------------------------------------


class _Calls:
    """The test's calls into the solution: their count and the last one."""

    def __init__(self, sock: socket.socket, child: int) -> None:
        self.sock = sock
        self.child = child
        self.count = 0
        self.last: dict[str, Any] | None = None

    def ended(self) -> str:
        """How the solution's process ended, in words."""
        try:
            _, status = os.waitpid(self.child, 0)
        except ChildProcessError:
            return "it ended"
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig == signal.SIGXCPU:
                return "it used up its CPU time"
            return f"it was killed by {signal.Signals(sig).name}"
        return f"it exited with status {os.WEXITSTATUS(status)}"

    def call(self, module: str, fn: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self.count += 1
        shown = ", ".join(
            [_quote(a) for a in args] + [f"{k}={_quote(v)}" for k, v in kwargs.items()]
        )
        self.last = {"call": f"{module}.{fn}({shown})"}
        try:
            _send(self.sock, (fn, args, kwargs))
            reply = _receive(self.sock, plain=True)
        except EOFError:
            self.last["ended"] = how = self.ended()
            raise RuntimeError(
                f"the solution's process ended during {self.last['call']}: {how}"
            ) from None
        if reply[0] == "returned":
            try:
                value = _Plain(io.BytesIO(reply[1])).load()
            except Exception as exc:
                self.last["raised"] = f"it returned something that is not plain data ({exc})"
                raise TypeError(self.last["raised"]) from None
            self.last["returned"] = _quote(value)
            return value
        _, kind, detail = reply
        self.last["raised"] = detail
        error = getattr(builtins, kind, None)
        if (
            isinstance(error, type)
            and issubclass(error, Exception)
            and not issubclass(error, (SystemExit, KeyboardInterrupt))
        ):
            raise error(detail)
        raise RuntimeError(f"{kind}: {detail}")


def _proxy(name: str, names: list[tuple[str, str, Any]], calls: _Calls) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, kind, extra in names:
        if kind == "function":
            setattr(module, key, _remote(name, key, calls))
        elif kind == "value":
            with suppress(Exception):  # a value that is no plain data is left out
                setattr(module, key, _Plain(io.BytesIO(extra)).load())
    return module


def _remote(module: str, fn: str, calls: _Calls) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return calls.call(module, fn, args, kwargs)

    call.__name__ = call.__qualname__ = fn
    return call


def _report(channel: int, nonce: str, **fields: Any) -> None:
    os.write(channel, (json.dumps({"nonce": nonce, **fields}) + "\n").encode())


def _test_side(sock: socket.socket, channel: int, child: int) -> None:
    job = json.loads(sys.stdin.buffer.read())
    sys.stdin.close()
    nonce = job["nonce"]
    module_file = job["module"]
    name = module_file[: -len(".py")] if module_file.endswith(".py") else module_file
    calls = _Calls(sock, child)
    try:
        _send(sock, module_file)
        reply = _receive(sock, plain=True)
    except EOFError:
        _report(
            channel,
            nonce,
            passed=False,
            stage="import",
            detail=f"{module_file} ended its process while it was imported: {calls.ended()}",
        )
        return
    if reply[0] == "broken":
        _report(
            channel,
            nonce,
            passed=False,
            stage="import",
            detail=f"importing {module_file} failed:\n{reply[1]}",
        )
        return
    namespace = {"__name__": "__hidden_test__"}
    sys.modules[name] = _proxy(name, reply[1], calls)
    try:
        exec(compile(job.get("setup") or "", "<setup>", "exec"), namespace)
        exec(compile(job["source"], "<hidden test>", "exec"), namespace)
    except BaseException as exc:
        message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        _report(
            channel,
            nonce,
            passed=False,
            stage="test",
            error=message[-MAX_QUOTE:],
            last=calls.last,
            calls=calls.count,
        )
        return
    _report(channel, nonce, passed=True, calls=calls.count)


def main() -> None:
    channel = int(sys.argv[1])
    # No other process of this user may read this one's memory (the secret is read below).
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise SystemExit("the harness could not make itself undumpable")
    os.write(channel, b"ready\n")
    ours, theirs = socket.socketpair()
    child = os.fork()
    if child == 0:
        # The solution's process: nothing of the verifier's channels, no secret read yet.
        ours.close()
        os.close(channel)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        with suppress(BaseException):
            _solution_side(theirs)
        os._exit(0)
    theirs.close()
    try:
        _test_side(ours, channel, child)
    finally:
        try:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


if __name__ == "__main__":
    main()
