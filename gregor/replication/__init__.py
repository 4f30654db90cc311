"""Partitions this broker hosts: leaders, high watermarks, acks, fetch wake-ups."""
