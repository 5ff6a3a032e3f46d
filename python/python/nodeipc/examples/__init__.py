"""Runnable examples: ``python -m nodeipc.examples.<name> --help``."""
