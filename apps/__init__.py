"""Thin applications on top of the rtamt engine (each exposes ``add_arguments`` and ``run``)."""
