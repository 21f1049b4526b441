"""Inner-hair-cell stages."""
from .envelope import IHCEnvelope, IHCEnvelopeCoeffs, IHCEnvelopeParams

__all__ = ["IHCEnvelope", "IHCEnvelopeParams", "IHCEnvelopeCoeffs"]
