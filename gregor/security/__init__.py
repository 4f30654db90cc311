"""Who a client is (principals) and what it may do: the security cores, free of I/O."""
