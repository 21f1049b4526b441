"""``rtamt models``: list the models, their outputs and parameters."""
from __future__ import annotations

import inspect

from rtamt.models import MODELS


def add_arguments(p):
    pass


def run(args) -> int:
    for name, cls in sorted(MODELS.items()):
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        print(f"{name}: {doc}")
        print(f"  outputs: {', '.join(cls.outputs)}")
        sig = inspect.signature(cls.__init__)
        params = [str(p) for p in list(sig.parameters.values())[1:]]
        print(f"  parameters: {', '.join(params)}")
        configs = getattr(__import__(cls.__module__, fromlist=['CONFIGS']), "CONFIGS", None)
        if configs:
            print(f"  configs: {', '.join(configs)} (default {sig.parameters['config'].default})")
    return 0
