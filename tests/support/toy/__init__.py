"""A toy stage written by following docs/architecture.md: the sweeps find it and run its
examples like the real stages' (tests/engine/test_toy_stage.py checks that it is in every
one, with no list edited)."""
