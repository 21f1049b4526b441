"""rtamt's streaming models and stages as ``torch.nn.Module`` layers (issue 22).

``y, state = layer(x, state=None)``: one block in, its output and the new state out; the
state is a dict of batch-first tensors (``layer.initial_state(batch, device, dtype)``),
so a recurrent network carries it from step to step, and :func:`detach_state` truncates
back-propagation through time.  ``layer.online_inference(x, context)`` is the same call
with lhotse's naming.

Forward passes run rtamt's compiled streaming kernels: outputs equal the streaming
models' bit for bit, and any block partition equals one call.  Gradients (to the input,
to the incoming state and to learnable parameters) run adjoint recursions in compiled
kernels (each beside its stage, e.g. :mod:`rtamt.filterbank.gammatone_grad`) for the
stages of Dau1997, Osses2021, King2019 and Paulick2024:
gammatone, IHC envelope, adaptation loops with the overshoot limiter, adaptation
high-pass, compressions, ear FIRs, the ``efilt``, Butterworth and King2019 modulation
filterbanks, the DRNL, Paulick2024's physiological IHC and the polyphase resampler; and
for the R128 loudness meter, :class:`R128Meter` (K-weighting, gating blocks, gated
statistics: momentary, short-term and integrated loudness with the gates held; the
true peak, a subgradient at its argmax).
One layer class, :class:`ChainLayer`, wraps any chain (the model and stage layers are
ChainLayers that construct theirs); a gradient requested through a stage
without a gradient rule is refused, naming the stage (docs/nn.md lists which).
"""
from ._base import DESIGN_KEY, StreamLayer, detach_state
from ._meter import R128Meter
from .layers import (
    LAYERS,
    AdaptHighpass,
    AdaptLoop,
    BrokenStick,
    ChainLayer,
    Dau1997,
    Gammatone,
    Glasberg2002,
    IHCEnvelope,
    King2019,
    KingModFilterbank,
    ModFilterbank,
    Moore2016,
    Osses2021,
    Paulick2024,
    PowerCompression,
    StageLayer,
)

__all__ = ["DESIGN_KEY", "StreamLayer", "detach_state", "LAYERS", "AdaptHighpass", "AdaptLoop",
           "BrokenStick", "ChainLayer", "Dau1997", "Gammatone", "Glasberg2002", "IHCEnvelope",
           "King2019", "KingModFilterbank", "ModFilterbank", "Moore2016",
           "Osses2021", "Paulick2024", "PowerCompression", "R128Meter", "StageLayer"]
