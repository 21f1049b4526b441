"""Several streaming objects on one input: itself a streaming object.

``Parallel({'dau': Dau1997(48000), 'meter': LoudnessMeter(fs=48000)})`` runs every child
on the same block and returns ``{name: child output}``, as a pedalboard ``Pedalboard`` is
itself a ``Plugin``.  A block is checked once, against the smallest ``input_limit`` of the
children, before any child runs, so a rejected block leaves every child's state unchanged.
The state is the children's states (``children``); two ``Parallel`` objects share a design
when their children have the same names and designs, and then their states stack by
stream like a chain's.
"""
from __future__ import annotations

from . import contract
from .contract import RtamtInputError, reject_nonfinite
from .stage import as_numpy_block

__all__ = ["Parallel"]


def _where(bad: tuple) -> str:
    names = ("batch", "channel")[2 - (len(bad) - 1):] if len(bad) > 1 else ()
    return ", ".join([f"{n} {i}" for n, i in zip(names, bad[:-1])]
                     + [f"sample {bad[-1]}; every child's state unchanged"])


class Parallel(contract.Composite):
    """Run named streaming objects side by side on one input (see the module docstring).

    children : ``{name: streaming object}`` (at least one).
    """

    name = "parallel"

    def __init__(self, children: dict):
        if not isinstance(children, dict) or not children:
            raise ValueError("Parallel needs a non-empty dict {name: streaming object}")
        for k, c in children.items():
            if not isinstance(c, contract.Streaming):
                raise TypeError(f"Parallel: child {k!r} ({type(c).__name__}) does not follow "
                                "the streaming contract (rtamt.Streaming)")
        self.children_map = dict(children)
        self.input_limit = min(float(c.input_limit) for c in children.values())
        self._block = 0

    @property
    def outputs(self) -> tuple:
        return tuple(self.children_map)

    @property
    def batchable(self) -> bool:
        return all(getattr(c, "batchable", False) for c in self.children_map.values())

    def __repr__(self):
        return f"Parallel({self.children_map!r})"

    def _check(self, arr):
        reject_nonfinite(arr, lambda: f"{self.name}: block {self._block}", _where,
                         limit=self.input_limit,
                         limit_text="the smallest input_limit of the children")

    def __call__(self, x) -> dict:
        arr, _ = as_numpy_block(x)
        self._check(arr)
        out = {k: c(x) for k, c in self.children_map.items()}
        self._block += 1
        return out

    def process_all(self, x) -> dict:
        arr, _ = as_numpy_block(x)
        self._check(arr)
        out = {k: c.process_all(x) for k, c in self.children_map.items()}
        self._block += 1
        return out

    def prepare(self, x) -> None:
        """Create every child's initial state (children without ``prepare`` are left as
        they are: they create their state on their first block)."""
        for c in self.children_map.values():
            p = getattr(c, "prepare", None)
            if p is not None:
                p(x)

    def state_leaves(self):
        out = []
        for c in self.children_map.values():
            lv = c.state_leaves() if hasattr(c, "state_leaves") else None
            if lv is None:
                return None
            out.extend(lv)
        return out

    def advance_blocks(self, k: int = 1) -> None:
        self._block += k
        for c in self.children_map.values():
            c.advance_blocks(k)

    def reset(self) -> None:
        for c in self.children_map.values():
            c.reset()
        self._block = 0

    def output_info(self) -> dict:
        return {k: c.output_info() for k, c in self.children_map.items()}

    def design_identity(self) -> dict:
        fp = self.__dict__.get("_fp")
        if fp is None:
            fp = self._fp = contract.fingerprint(
                *[(k, c.design_identity()) for k, c in self.children_map.items()])
        return {"name": self.name, "children": list(self.children_map), "fingerprint": fp}

    def state_dict(self) -> dict:
        """The children's states (``children``) in the contract's schema."""
        ch = {k: c.state_dict() for k, c in self.children_map.items()}
        first = next(iter(ch.values()))
        return contract.header(self, self._block, contract.deep(first.get("stream")), children=ch)

    def load_children(self, states: dict) -> None:
        """Load ``{name: state}`` into the children: all or none (each checked by its own
        ``load_state_dict``)."""
        if not isinstance(states, dict) or set(states) != set(self.children_map):
            got = sorted(states) if isinstance(states, dict) else type(states).__name__
            raise RtamtInputError(f"{self.name}: the state's children {got} differ from "
                                  f"{sorted(self.children_map)}")
        backup = {k: c.state_dict() for k, c in self.children_map.items()}
        try:
            for k, c in self.children_map.items():
                c.load_state_dict(states[k])
        except Exception:
            for k, c in self.children_map.items():
                c.load_state_dict(backup[k])
            raise

    def load_state_dict(self, sd: dict) -> None:
        contract.check_identity(self.name, sd, self)
        self.load_children(sd.get("children"))
        self._block = int(sd["block"])
