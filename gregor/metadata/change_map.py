"""ChangeMap: a read-only mapping that a new version shares with the old, copying only the
keys changed since a common base (the metadata image's topics, by id and by name).

    old = ChangeMap({"a": 1, "b": 2})
    new = old.fork()          # O(changes since the base), not O(len)
    new["c"] = 3; del new["a"]
    new.freeze()              # an image's mapping: writes raise TypeError from now on
    list(old), list(new)      # ['a', 'b'], ['b', 'c']

Why: every metadata change replays into a new image (image.py), and a dict copy of the topics
costs O(topics): at 10,000 topics each creation copied (and later freed) two 10,000-entry dicts
on the controller's speculative image, again on its committed one and on every broker, so the
CPU per creation doubled between 0 and 10,000 topics. Kafka's image keeps its topics in
persistent maps for the same reason. Here a version is `base` (a dict no one writes once
shared), `over` (the keys set since: new or replaced) and `gone` (base keys deleted since).
A fork copies `over` and `gone`; once they hold more than sqrt(2n) keys (n: the base's), the
fork starts from a new base instead. With one change per fork (a creation), the forks between
two new bases copy sqrt(2n)/2 keys each on average and the new base n keys every sqrt(2n)
changes: about sqrt(2n) keys copied per change, 141 at 10,000 topics, where an eighth as the
limit copied n/16 + 8 (633) and made a creation cost a fifth more at 10,000 topics than at 30.

It iterates in a dict's order (insertion order; a replaced key keeps its place, a deleted key
added again goes last), so whatever walks an image (snapshots, the simulation) sees the same
order as with dicts. Reads cost a method call more than a dict's.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping, ValuesView
from math import isqrt
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

_MISSING: Any = object()
_READ_ONLY = "a frozen ChangeMap is read-only: fork() it to change it"
MIN_CHANGES = 32  # changes a fork always carries before it starts from a new base


class ChangeMap(Mapping[K, V], Generic[K, V]):
    __slots__ = ("_base", "_over", "_gone", "_len", "_frozen", "_limit")

    def __init__(self, base: Mapping[K, V] | None = None) -> None:
        self._base: dict[K, V] = dict(base) if base is not None else {}
        self._over: dict[K, V] = {}
        self._gone: set[K] = set()
        self._len = len(self._base)
        self._frozen = False
        self._limit = _limit(self._len)

    @classmethod
    def fork_of(cls, mapping: Mapping[K, V]) -> ChangeMap[K, V]:
        """A writable version of `mapping` (a ChangeMap's fork; any other mapping's copy)."""
        if isinstance(mapping, ChangeMap):
            return mapping.fork()
        return cls(mapping)

    def fork(self) -> ChangeMap[K, V]:
        """A writable version equal to this one, sharing its base."""
        if len(self._over) + len(self._gone) > self._limit:
            return ChangeMap.__new__(ChangeMap)._rebased(self._flat())
        new: ChangeMap[K, V] = ChangeMap.__new__(ChangeMap)
        new._base, new._over, new._gone = self._base, self._over.copy(), self._gone.copy()
        new._len, new._frozen, new._limit = self._len, False, self._limit
        return new

    def _flat(self) -> dict[K, V]:
        """This version as one dict, in its order: the base copied (a dict's copy reuses its
        keys' hashes: no key's __hash__ runs), less what is gone, with what was set since
        (a replaced key keeps its place; a new one, or one deleted and set again, goes last)."""
        flat = self._base.copy()
        for key in self._gone:
            del flat[key]
        flat.update(self._over)
        return flat

    def _rebased(self, base: dict[K, V]) -> ChangeMap[K, V]:
        self._base, self._over, self._gone = base, {}, set()
        self._len, self._frozen = len(base), False
        self._limit = _limit(self._len)
        return self

    def freeze(self) -> ChangeMap[K, V]:
        self._frozen = True
        return self

    # -- reads ----------------------------------------------------------------------------------

    def __getitem__(self, key: K) -> V:
        value = self._over.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if key in self._gone:
            raise KeyError(key)
        return self._base[key]

    def get(self, key: K, default: Any = None) -> Any:
        value = self._over.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if key in self._gone:
            return default
        return self._base.get(key, default)

    def __contains__(self, key: object) -> bool:
        # a key looked for is most often new (a topic being created): two lookups, not three
        return key in self._over or (key in self._base and key not in self._gone)

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        base, over, gone = self._base, self._over, self._gone
        if not over and not gone:
            yield from base
            return
        for key in base:
            if key not in gone:
                yield key
        for key in over:
            if key not in base or key in gone:
                yield key

    def _items(self) -> Iterator[tuple[K, V]]:
        base, over, gone = self._base, self._over, self._gone
        if not over and not gone:
            yield from base.items()
            return
        for key, value in base.items():
            if key not in gone:
                yield key, over.get(key, value)
        for key, value in over.items():
            if key not in base or key in gone:
                yield key, value

    def items(self) -> ItemsView[K, V]:
        return _Items(self)

    def values(self) -> ValuesView[V]:
        return _Values(self)

    def __repr__(self) -> str:
        return f"ChangeMap({dict(self._items())!r})"

    # -- writes (a fork, before it is frozen) ---------------------------------------------------

    def _check_writable(self) -> None:
        if self._frozen:
            raise TypeError(_READ_ONLY)

    def __setitem__(self, key: K, value: V) -> None:
        if self._frozen:
            raise TypeError(_READ_ONLY)
        over = self._over
        if key not in over and (key not in self._base or key in self._gone):
            self._len += 1
        over[key] = value

    def add(self, key: K, value: V) -> None:
        """`self[key] = value` for a key known not to be here: one lookup fewer or two."""
        if self._frozen:
            raise TypeError(_READ_ONLY)
        self._over[key] = value
        self._len += 1

    def __delitem__(self, key: K) -> None:
        self._check_writable()
        if key in self._over:
            del self._over[key]
            if key in self._base:
                self._gone.add(key)
        elif key in self._base and key not in self._gone:
            self._gone.add(key)
        else:
            raise KeyError(key)
        self._len -= 1

    def pop(self, key: K, default: Any = _MISSING) -> Any:
        if key in self:
            value = self[key]
            del self[key]
            return value
        if default is _MISSING:
            raise KeyError(key)
        return default


class _Items(ItemsView[K, V]):
    _mapping: ChangeMap[K, V]

    def __iter__(self) -> Iterator[tuple[K, V]]:
        return self._mapping._items()


class _Values(ValuesView[V]):
    _mapping: ChangeMap[Any, V]

    def __iter__(self) -> Iterator[V]:
        return (value for _key, value in self._mapping._items())


def _limit(base: int) -> int:
    """The changes a fork of a base of `base` keys carries before it starts from a new one."""
    return max(MIN_CHANGES, isqrt(base << 1))
