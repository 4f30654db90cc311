"""What every coordinator shares: `runtime` (one generic runtime over a shard type: loading,
unloading, writing, held answers, timers)."""
