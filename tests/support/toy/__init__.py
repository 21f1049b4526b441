"""A toy stage written by following docs/architecture.md (tests/engine/test_toy_stage.py checks
that the framework gives it everything the real stages have)."""
