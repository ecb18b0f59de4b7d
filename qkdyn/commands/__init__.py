"""The ``qkdyn`` subcommands that wrap the theory, simulation and verification API (one module each)."""
