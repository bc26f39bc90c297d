"""What the bridge says about flows: outcomes and their lines, counters, the content view's text, the usage table, the metrics' labels."""
