"""Configuration: the ``bridge_*`` options (``options``), routes and routes files, the client keys file."""
