"""ChangeMap behaves as a dict copied at every fork (a model checked by hypothesis): the same
items in the same order, lengths, membership; an older version never sees a newer one's
changes, and a frozen one refuses writes. `add` (a key known to be new) is a set."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.metadata.change_map import ChangeMap

pytestmark = pytest.mark.unit

KEYS = st.integers(0, 40)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEYS, st.integers()),
        st.tuples(st.just("add"), KEYS, st.integers()),  # `add` when the key is new, else set
        st.tuples(st.just("del"), KEYS, st.none()),
        st.tuples(st.just("fork"), st.none(), st.none()),
    ),
    max_size=300,
)


def same(cm: ChangeMap[int, int], model: dict[int, int]) -> None:
    assert list(cm.items()) == list(model.items())
    assert list(cm) == list(model) and list(cm.values()) == list(model.values())
    assert len(cm) == len(model) and cm == model
    for k in range(41):
        assert (k in cm) == (k in model) and cm.get(k, "none") == model.get(k, "none")


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, st.integers(), max_size=20), OPS)
def test_a_change_map_is_a_dict_copied_at_every_fork(base: dict[int, int], ops: list) -> None:
    cm: ChangeMap[int, int] = ChangeMap.fork_of(base)
    model = dict(base)
    versions: list[tuple[ChangeMap[int, int], dict[int, int]]] = []
    for op, key, value in ops:
        if op == "set" or (op == "add" and key in model):
            cm[key] = value
            model[key] = value
        elif op == "add":
            cm.add(key, value)
            model[key] = value
        elif op == "del":
            assert cm.pop(key, "none") == model.pop(key, "none")
        else:
            versions.append((cm.freeze(), dict(model)))
            cm = cm.fork()
        same(cm, model)
    for old, old_model in versions:  # forks and their writes left every older version as it was
        same(old, old_model)


def test_a_frozen_version_refuses_writes_and_a_missing_key_raises() -> None:
    cm = ChangeMap({"a": 1}).freeze()
    with pytest.raises(TypeError):
        cm["b"] = 2
    with pytest.raises(TypeError):
        cm.add("b", 2)
    with pytest.raises(TypeError):
        del cm["a"]
    new = cm.fork()
    del new["a"]
    with pytest.raises(KeyError):
        new["a"]
    with pytest.raises(KeyError):
        del new["a"]
    assert dict(cm) == {"a": 1} and dict(new) == {}


def test_a_fork_after_many_changes_starts_from_a_new_base() -> None:
    first: ChangeMap[int, int] = ChangeMap({i: i for i in range(5000)})
    cm = first
    for i in range(101):  # a fork shares the base while the changes stay few: sqrt(2n) = 100
        cm = cm.fork()
        cm[5000 + i] = i
    assert cm._base is first._base and len(cm._over) == 101
    cm = cm.fork()  # more than sqrt(2n) changes: a new base
    assert cm._base is not first._base and not cm._over
    cm[5101] = 101
    assert list(cm.items()) == [(i, i) for i in range(5000)] + [(5000 + i, i) for i in range(102)]


def test_what_a_fork_copies_stays_near_the_square_root_of_the_size() -> None:
    """A change or two per version, as a topic created (or deleted) per commit: a fork copies
    at most √(2n) changed keys (141 at 10,000; 150 once the map has grown to 11,333), never
    a share of the whole map (an eighth: 1,250), and a new base comes every hundred forks."""
    cm: ChangeMap[int, int] = ChangeMap({i: i for i in range(10_000)})
    largest = bases = 0
    for i in range(2_000):
        new = cm.fork()
        bases += new._base is not cm._base
        largest = max(largest, len(new._over) + len(new._gone))
        new[10_000 + i] = i
        if i % 3 == 0:
            del new[i]
        cm = new.freeze()
    assert largest <= 150 and 15 <= bases <= 20
    assert len(cm) == 10_000 + 2_000 - 667 and cm[11_999] == 1_999 and 0 not in cm


class _Key:
    """A key counting the calls of its __hash__ (uuid.UUID's is Python code, as this one)."""

    hashed = 0

    def __init__(self, n: int) -> None:
        self.n = n

    def __hash__(self) -> int:
        _Key.hashed += 1
        return hash(self.n)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Key) and other.n == self.n


def test_a_new_base_keeps_the_order_and_hashes_only_the_changed_keys() -> None:
    keys = [_Key(i) for i in range(1250)]  # a new base after sqrt(2n) = 50 changes
    cm: ChangeMap[_Key, int] = ChangeMap({k: k.n for k in keys})
    model = dict(cm.items())
    changed = 0
    for i in range(0, 26, 2):  # deleted, replaced, deleted and set again, new (52 changes)
        cm = cm.fork()
        del cm[keys[i]], model[keys[i]]
        cm[keys[i + 1]] = model[keys[i + 1]] = -i
        cm[keys[i]] = model[keys[i]] = i
        cm[_Key(1000 + i)] = model[_Key(1000 + i)] = i
        changed += 4
    _Key.hashed = 0
    rebased = cm.fork()
    assert rebased._base is not cm._base and not rebased._over  # a new base
    assert _Key.hashed <= changed  # the unchanged keys were not hashed again
    assert list(rebased.items()) == list(model.items())
