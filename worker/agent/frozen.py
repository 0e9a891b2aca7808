"""Read-only JSON values: what a session's cached history shares with every later turn.

A process keeps a session's decoded history from one turn to the next
(:mod:`worker.agent.transcript`), so the same dicts and lists reach every model request,
tool and guard of every later turn. :func:`freeze` makes them read-only: a
:class:`FrozenDict` or :class:`FrozenList` refuses every change with :class:`TypeError`.
They stay ``dict`` and ``list`` subclasses, so the JSON encoders, pydantic and ``==``
treat them as the plain values they replace; a copy (``dict(x)``, ``{**x}``, ``x + [...]``,
:func:`copy.copy`, :func:`copy.deepcopy`) is a plain, writable value.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, NoReturn

__all__ = ["FrozenDict", "FrozenList", "freeze", "freeze_sized", "thaw"]


def _refuse(self: object, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(
        f"{type(self).__name__} is shared history and read-only: change a copy of it instead"
    )


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses to change."""

    __slots__ = ()

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        thawed: dict[str, Any] = thaw(self)
        return thawed

    def __reduce__(self) -> tuple[type[dict[str, Any]], tuple[dict[str, Any]]]:
        # Pickled (a task argument, a test's copy) it comes back a plain dict.
        return dict, (dict(self),)


class FrozenList(list[Any]):
    """A ``list`` that refuses to change."""

    __slots__ = ()

    __setitem__ = _refuse
    __delitem__ = _refuse
    __iadd__ = _refuse
    __imul__ = _refuse
    append = _refuse
    clear = _refuse
    extend = _refuse
    insert = _refuse
    pop = _refuse
    remove = _refuse
    reverse = _refuse
    sort = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        thawed: list[Any] = thaw(self)
        return thawed

    def __reduce__(self) -> tuple[type[list[Any]], tuple[list[Any]]]:
        return list, (list(self),)


def freeze(value: Any) -> Any:
    """``value`` with every dict and list in it read-only (frozen parts are kept as they are)."""
    return _freeze(value, [0])


def freeze_sized(value: Any) -> tuple[Any, int]:
    """``value`` frozen, and about how many bytes the objects freezing made or kept hold
    (parts already frozen count 0: they are someone else's)."""
    size = [0]
    return _freeze(value, size), size[0]


def thaw(value: Any) -> Any:
    """A plain, writable deep copy of a JSON value (frozen or not)."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value


#: Bytes of an empty ``str``; an ASCII string holds one more per character.
_STR_BYTES = sys.getsizeof("")
#: Values kept as they are, besides strings.
_SCALARS = frozenset({int, float, bool, type(None)})


# A turn that reads a whole log freezes all of it: about as long as decoding its JSON took,
# so the loops below test types by identity and size strings without a call.
def _freeze(value: Any, size: list[int]) -> Any:
    kind = type(value)
    if kind is dict:
        return _freeze_items(value.items(), size)
    if kind is list:
        return _freeze_list(value, size)
    if kind is FrozenDict or kind is FrozenList:
        return value
    if isinstance(value, dict):
        return _freeze_items(value.items(), size)
    if isinstance(value, list | tuple):
        return _freeze_list(value, size)
    return value


def _freeze_items(items: Iterable[tuple[str, Any]], size: list[int]) -> FrozenDict:
    out = {}
    for key, item in items:
        kind = type(item)
        if kind is str:
            size[0] += _STR_BYTES + len(item)
        elif kind not in _SCALARS:
            item = _freeze(item, size)
        out[key] = item
    size[0] += sys.getsizeof(out)
    return FrozenDict(out)


def _freeze_list(items: Iterable[Any], size: list[int]) -> FrozenList:
    out = []
    for item in items:
        kind = type(item)
        if kind is str:
            size[0] += _STR_BYTES + len(item)
        elif kind not in _SCALARS:
            item = _freeze(item, size)
        out.append(item)
    size[0] += sys.getsizeof(out)
    return FrozenList(out)
