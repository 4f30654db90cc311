"""Coordinators: `group/` (consumer groups and committed offsets) and the runtime that appends
their records to `__consumer_offsets` and replays them."""
