"""The EBU R128 meter as a scheduled stream: ``Scheduler.open('r128', fs, channels=2)``.

:class:`R128Stream` is the streaming front end the scheduler runs for the model names
``'r128'`` and ``'bs1770'`` (:data:`METERS`): a
:class:`~rtamt.loudness.bs1770.LoudnessMeter` (one programme: its channels are summed
into one loudness, BS.1770-4 eq. (2)) whose call returns, for every block, the meter's
outputs by name, as a model's outputs are published::

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

from .bs1770 import LoudnessMeter, Params

__all__ = ["R128Stream", "METERS", "OUTPUTS"]

#: what a scheduled meter publishes per block (the meter's ``outputs``)
OUTPUTS = LoudnessMeter.outputs


class R128Stream(LoudnessMeter):
    """A :class:`~rtamt.loudness.bs1770.LoudnessMeter` as a scheduler's stream processor.

    ``R128Stream(fs, channels=2, layout=None, weights=None, mode='histogram', lra_hop=1,
    truepeak='sinc')``: the meter's :class:`~rtamt.loudness.bs1770.Params` (the
    ``model_kwargs`` of ``Scheduler.open('r128', fs, channels=C, model_kwargs={...})``).
    It is the meter (its stages, ``to()``, properties,
    :meth:`~rtamt.loudness.bs1770.LoudnessMeter.statistics`, snapshots), named ``'r128'``
    in its design identity; only a call differs: ``r(x)`` meters one ``(C, T)`` block
    (``(T,)`` when ``C == 1``) and returns ``{name: value}`` for :data:`OUTPUTS` (the
    meter's :meth:`~rtamt.loudness.bs1770.LoudnessMeter.process_all`).  Its snapshots are
    the meter's (kind ``LoudnessMeter``, design ``'bs1770'``): an offline meter of the same
    design continues them, and the reverse.  ``r.meter`` is ``r`` itself (the former
    front end held a meter there).
    """

    name = "r128"
    #: the scheduler publishes the returned dict as the result's outputs (no wrapping key)
    named_outputs = True

    def __init__(self, fs: float = 48000.0, channels: int = 2, **kwargs):
        super().__init__(Params(fs=fs, channels=channels, **kwargs))

    @property
    def meter(self) -> LoudnessMeter:
        """The meter: this object."""
        return self

    def __call__(self, x) -> dict:
        """Meter one block; ``{name: value}`` of :data:`OUTPUTS` after it."""
        return self.process_all(x)


#: the meters :meth:`rtamt.scheduler.Scheduler.open` makes by name (beside
#: :data:`rtamt.models.MODELS`): ``METERS[name](fs, channels=C, **model_kwargs)``
METERS = {"r128": R128Stream, "bs1770": R128Stream}
