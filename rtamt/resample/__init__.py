"""Sample-rate conversion stages (streaming, causal)."""
from .polyphase import (
                        MAX_RATE,
                        PRESETS,
                        Resampler,
                        ResamplerCoeffs,
                        ResamplerParams,
                        block_output_length,
                        design,
                        gain_db,
                        group_delay,
                        output_length,
)

__all__ = ["Resampler", "ResamplerParams", "ResamplerCoeffs", "design", "output_length",
           "block_output_length", "group_delay", "gain_db", "PRESETS", "MAX_RATE"]
