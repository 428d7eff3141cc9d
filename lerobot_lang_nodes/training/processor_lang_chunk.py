"""Pre/post-processors of `lang_chunk`, found by LeRobot's factory by naming convention.

LeRobot's default pipelines fit: rename, batch, device and (un)normalise with the dataset's
statistics. The instruction travels untouched in the batch's ``task`` entry; the policy hashes
its words itself, so no tokenizer step (and no tokenizer download) is involved.
"""

from __future__ import annotations

from typing import Any

import torch

from lerobot.processor import PolicyAction, PolicyProcessorPipeline
from lerobot.processor import make_default_pre_post_processors

from .configuration_lang_chunk import LangChunkConfig


def make_lang_chunk_pre_post_processors(
        config: LangChunkConfig, dataset_stats: dict[str, dict[str, torch.Tensor]] | None = None,
) -> tuple[PolicyProcessorPipeline[dict[str, Any], dict[str, Any]],
           PolicyProcessorPipeline[PolicyAction, PolicyAction]]:
    """Rename -> batch -> device -> normalise, and unnormalise -> CPU."""
    return make_default_pre_post_processors(config, dataset_stats,
                                            normalizer_device=config.device)
