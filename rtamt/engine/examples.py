"""The test examples a stage declares (issue 40 item 7): what the sweeps of ``tests/`` run.

Every :class:`rtamt.engine.stage.Stage` subclass ends its body with a classmethod
``examples()`` returning one or more :class:`Example` (a base class that is not run
itself returns ``()``).  The sweeps (block-size invariance, stack/split by stream,
snapshots, Triton = numba, gradcheck where the stage has a gradient rule, the streaming
contract) find the stage classes by importing the package and collecting the subclasses of
``Stage``, and run each example; a new stage therefore enters every sweep from its own
file, and a stage class that declares no examples fails a test
(``tests/stages/test_examples.py``; docs/architecture.md, "Adding a stage").

The inputs an example names (made by ``tests/support/_examples.py``, at 48 kHz unless
the example's ``fs`` says otherwise; ``T`` samples):

* ``"signal"``: one mono signal ``(T,)`` in AMT units (RMS 1 = 100 dB SPL), 60-80 dB SPL,
  with an abrupt onset, a silent gap and a re-onset;
* ``"pair"``: two such signals ``(2, T)`` (two streams of a signal stage, two channels of
  a channel stage);
* ``"bands"``, ``"envelopes"``, ``"adapted"``: the outputs ``(C, T)`` of the gammatone
  filterbank, the inner-hair-cell envelope and the adaptation loops of
  :class:`rtamt.models.Dau1997` run on ``"signal"`` (``C`` channels whose centre
  frequencies ``fc`` a parameter may take, see :attr:`Example.per_channel`);
* ``"frames"``: the frames a frame stage of the loudness models reads (the stage is
  built and its streaming contract checked; the sample sweeps run only the stages whose
  flow is samples in and out);
* ``"steps"``: the rows ``(k, e_M, e_S)`` of the 100 ms steps the R128 meter's gating
  blocks emit, what its gated-statistics stage adds up (built and its streaming contract
  checked, like a frame stage; ``tests/loudness`` runs it).
"""
from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["Example", "INPUTS", "SAMPLE_INPUTS"]

#: the inputs an example may name (see the module docstring)
INPUTS = ("signal", "pair", "bands", "envelopes", "adapted", "frames", "steps")
#: the inputs that are sample blocks (what the sample sweeps run)
SAMPLE_INPUTS = INPUTS[:5]


@dataclasses.dataclass(frozen=True, eq=False)
class Example:
    """One construction of a stage that the test sweeps run.

    ``id``: the name of the case in the sweeps' parametrised ids (unique over all
    stages); ``params``: the constructor's keyword arguments; ``input``: one of
    :data:`INPUTS`; ``per_channel``: parameters that take one value per input channel,
    ``{name: "fc"}`` (the input channels' centre frequencies, Hz) or ``{name: (lo,
    hi)}`` (values spread linearly from ``lo`` to ``hi``); ``tol``: the largest relative
    difference (max |got - ref| / max |ref|) the sweeps allow for float32 and float64
    (block partitions, Triton against numba); ``streamed``: the output is a stream that
    blocks concatenate along time (``False``: each block's output summarises the block,
    e.g. the running true peak; the sweeps then compare the states the blocks leave);
    ``per_block``: state arrays that describe the last block only (e.g. how many steps it
    wrote), left out where states after different block partitions are compared;
    ``dtype_out``: the output's dtype where it is not the input's (a stage that computes
    in float64 whatever it is given); ``dtypes``: the input dtypes the stage takes (the
    sweeps run float32 and float64 where both are)."""

    id: str
    params: dict = dataclasses.field(default_factory=dict)
    input: str = "signal"
    per_channel: dict = dataclasses.field(default_factory=dict)
    tol: tuple = (1e-6, 1e-12)
    streamed: bool = True
    per_block: tuple = ()
    dtype_out: str | None = None
    dtypes: tuple = ("float32", "float64")

    def __post_init__(self):
        if self.input not in INPUTS:
            raise ValueError(f"example {self.id!r}: input {self.input!r} is not one of "
                             f"{INPUTS}")
        for k, v in self.per_channel.items():
            if not (v == "fc" or (isinstance(v, tuple) and len(v) == 2)):
                raise ValueError(f"example {self.id!r}: per_channel {k!r} must be 'fc' or "
                                 f"(lo, hi), got {v!r}")

    def make(self, cls, fc=None):
        """A new ``cls`` built from :attr:`params`, with :attr:`per_channel` filled in
        for an input whose channels have centre frequencies ``fc`` (Hz)."""
        kw = dict(self.params)
        for k, v in self.per_channel.items():
            kw[k] = tuple(fc) if v == "fc" else tuple(np.linspace(v[0], v[1], len(fc)))
        return cls(**kw)

    def takes(self, dtype) -> bool:
        """Whether the stage takes input of ``dtype`` (:attr:`dtypes`)."""
        return np.dtype(dtype).name in self.dtypes

    def out_dtype(self, dtype) -> np.dtype:
        """The dtype of the output for input of ``dtype``."""
        return np.dtype(self.dtype_out or dtype)

    def tolerance(self, dtype) -> float:
        """:attr:`tol` for ``dtype`` (float32 or float64)."""
        return self.tol[np.dtype(dtype) == np.float64]
