"""Real servers on loopback (issue 28): independent implementations of the dialects we speak."""
