"""The composition root: broker config, wiring, dispatch and timers."""
