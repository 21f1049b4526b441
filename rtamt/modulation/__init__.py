"""Modulation stages."""
from .modfb import (
                    ModFilterbank,
                    ModFilterbankCoeffs,
                    ModFilterbankParams,
                    modulation_centre_frequencies,
                    to_padded,
                    to_ragged,
)

__all__ = ["ModFilterbank", "ModFilterbankParams", "ModFilterbankCoeffs",
           "modulation_centre_frequencies", "to_padded", "to_ragged"]
