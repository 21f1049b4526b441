"""The EBU R128 meter as a scheduled stream: ``Scheduler.open('r128', fs, channels=2)``.

:class:`R128Stream` is the streaming front end the scheduler runs for the model names
``'r128'`` and ``'bs1770'`` (:data:`METERS`): it holds one
:class:`~rtamt.loudness.bs1770.LoudnessMeter` (one programme: its channels are summed
into one loudness, BS.1770-4 eq. (2)) and returns, for every block, the meter's outputs
by name, as a model's outputs are published::

    {'momentary': M, 'short_term': S, 'integrated': I, 'loudness_range': LRA,
     'true_peak': TP}

(LUFS / LU / dB TP after the block, ``None`` while not defined: the fields of the
block's :class:`~rtamt.loudness.bs1770.LoudnessResult`).  The state is the meter's own:
``state_dict()`` is :meth:`LoudnessMeter.state_dict` (an offline meter of the same
design loads a stream's snapshot and continues it bit for bit, and the reverse), and
any partition of a stream into blocks gives the bits of one call, so a scheduled
stream's outputs equal its own offline meter's fed the same samples.

The meter does not batch (``batchable = False``): the scheduler runs each stream in
calls of its own (docs/scheduler.md, "The R128 meter").
"""
from __future__ import annotations

from ..engine.contract import Registered
from .bs1770 import LoudnessMeter, Params

__all__ = ["R128Stream", "METERS", "OUTPUTS"]

#: what a scheduled meter publishes per block (the meter's ``outputs``)
OUTPUTS = LoudnessMeter.outputs


class R128Stream(Registered):
    """A :class:`~rtamt.loudness.bs1770.LoudnessMeter` as a scheduler's stream processor.

    ``R128Stream(fs, channels=2, layout=None, weights=None, mode='histogram', lra_hop=1,
    truepeak='sinc')``: the meter's :class:`~rtamt.loudness.bs1770.Params` (the
    ``model_kwargs`` of ``Scheduler.open('r128', fs, channels=C, model_kwargs={...})``).
    ``r(x)`` meters one ``(C, T)`` block (``(T,)`` when ``C == 1``) and returns
    ``{name: value}`` for :data:`OUTPUTS`; ``r.meter`` is the meter (its properties,
    :meth:`~rtamt.loudness.bs1770.LoudnessMeter.statistics`, ...).
    """

    name = "r128"
    outputs = OUTPUTS
    batchable = False          # one programme per meter (its channels are one loudness)
    #: the scheduler publishes the returned dict as the result's outputs (no wrapping key)
    named_outputs = True

    def __init__(self, fs: float = 48000.0, channels: int = 2, **kwargs):
        self.meter = LoudnessMeter(Params(fs=fs, channels=channels, **kwargs))
        self.input_limit = self.meter.input_limit

    def __repr__(self):
        return f"{type(self).__name__}({self.meter.params!r})"

    @property
    def params(self) -> Params:
        """The meter's design (:class:`~rtamt.loudness.bs1770.Params`)."""
        return self.meter.params

    @property
    def backend(self) -> str:
        return self.meter.backend

    @property
    def device(self):
        return self.meter.device

    def to(self, device=None, *, backend: str | None = None):
        """Run the meter's sample stages on ``backend`` / ``device``
        (:meth:`LoudnessMeter.to`).  Returns self."""
        self.meter.to(device, backend=backend)
        return self

    def __call__(self, x) -> dict:
        """Meter one block; ``{name: value}`` of :data:`OUTPUTS` after it."""
        return self.meter.process_all(x)

    def process_all(self, x) -> dict:
        """The same as a call (the meter has no intermediate outputs to show)."""
        return self.meter.process_all(x)

    def output_info(self) -> dict:
        return self.meter.output_info()

    def reset(self) -> None:
        self.meter.reset()

    def state_dict(self) -> dict:
        """The meter's snapshot (:meth:`LoudnessMeter.state_dict`)."""
        return self.meter.state_dict()

    def load_state_dict(self, sd: dict) -> None:
        """Load a meter's snapshot (:meth:`LoudnessMeter.load_state_dict`: checked before
        anything changes; former snapshots migrated)."""
        self.meter.load_state_dict(sd)

    def design_identity(self) -> dict:
        """The meter's design identity (its fingerprint), named ``'r128'``."""
        return dict(self.meter.design_identity(), name=self.name)

    def warm_kernels(self) -> None:
        """Load the gating kernels a stream reaches only after 400 ms / 3 s
        (:meth:`LoudnessMeter.warm_kernels`), on a copy of the statistics."""
        self.meter.warm_kernels()


#: the meters :meth:`rtamt.scheduler.Scheduler.open` makes by name (beside
#: :data:`rtamt.models.MODELS`): ``METERS[name](fs, channels=C, **model_kwargs)``
METERS = {"r128": R128Stream, "bs1770": R128Stream}
