"""Published tables shared by several parts of the library (numbers only; provenance
next to each module)."""
