"""Coordinators: `group/` (consumer groups and committed offsets) and `txn/` (transactions),
each a shard per partition of its internal topic, driven by the one generic runtime in
`common/` (`runtime.py` and `txn/runtime.py` are the two coordinators' APIs over it)."""
