"""What outlives a flow: the reasoning store's backends (memory, SQLite, Redis) and the usage ledger."""
