"""Pre/post-processors of `two_head`, found by LeRobot's factory by naming convention.

LeRobot's default pipelines fit: rename, batch, device and (un)normalise; the instruction text
travels in the batch's ``task`` entry, which the policy encodes with its own byte tokenizer.
"""

from __future__ import annotations

from typing import Any

import torch

from lerobot.processor import PolicyAction, PolicyProcessorPipeline
from lerobot.processor import make_default_pre_post_processors

from .configuration_two_head import TwoHeadConfig


def make_two_head_pre_post_processors(
        config: TwoHeadConfig, dataset_stats: dict[str, dict[str, torch.Tensor]] | None = None,
) -> tuple[PolicyProcessorPipeline[dict[str, Any], dict[str, Any]],
           PolicyProcessorPipeline[PolicyAction, PolicyAction]]:
    """Rename -> batch -> device -> normalise, and unnormalise -> CPU."""
    return make_default_pre_post_processors(config, dataset_stats,
                                            normalizer_device=config.device)
