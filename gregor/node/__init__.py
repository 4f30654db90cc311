"""What one node does toward the controller and the other nodes, sans I/O: registration and
heartbeats (lifecycle.py), forwarding admin writes (forwarding.py). Drivers in gregor/runtime/
send what these cores return."""
