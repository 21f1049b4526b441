"""A toy stage written by following docs/architecture.md (tests/test_toy_stage.py checks
that the framework gives it everything the real stages have)."""
