"""LeRobot config of `two_head`: the project's tiny policy with a text head and an action head.

Registered with LeRobot's config registry like LeRobot's own policies, so a saved checkpoint's
config.json (`"type": "two_head"`) loads through `PreTrainedConfig.from_pretrained` and the
policy factory (`get_policy_class`, `make_pre_post_processors`) once this module is imported.
The file names follow LeRobot's convention (configuration_ / modeling_ / processor_<name>).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lerobot.configs import NormalizationMode, PreTrainedConfig
from lerobot.optim import AdamWConfig

from lerobot_lang_nodes.so101.calibration import JOINT_NAMES

POLICY_TYPE = 'two_head'


@PreTrainedConfig.register_subclass(POLICY_TYPE)
@dataclass
class TwoHeadConfig(PreTrainedConfig):
    """A small byte-level GPT-2 (text head) whose hidden states also condition an MLP action head.

    State and actions are SO-101 joint positions in radians, in ``joint_names`` order (the
    project's own convention, not LeRobot's degrees: this type is trained on the sim's units).
    """

    chunk_size: int = 10
    n_action_steps: int = 10
    joint_names: list[str] = field(default_factory=lambda: list(JOINT_NAMES))
    # Text trunk (transformers GPT2LMHeadModel) over bytes 0-255 plus BOS, EOS and PAD.
    text_embed_dim: int = 64
    text_layers: int = 2
    text_heads: int = 2
    max_text_len: int = 256
    max_new_tokens: int = 64
    # Action head: an MLP over [state, pooled image grid per camera, instruction embedding].
    image_pool: int = 4
    hidden_dim: int = 128
    normalization_mapping: dict[str, NormalizationMode] = field(default_factory=lambda: {
        'VISUAL': NormalizationMode.IDENTITY,
        'STATE': NormalizationMode.MEAN_STD,
        'ACTION': NormalizationMode.MEAN_STD,
    })
    optimizer_lr: float = 3e-3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_action_steps > self.chunk_size:
            raise ValueError(f'n_action_steps={self.n_action_steps} exceeds chunk_size='
                             f'{self.chunk_size}; lower n_action_steps')
        if self.text_embed_dim % self.text_heads:
            raise ValueError(f'text_embed_dim={self.text_embed_dim} is not a multiple of '
                             f'text_heads={self.text_heads}')

    def get_optimizer_preset(self) -> AdamWConfig:
        return AdamWConfig(lr=self.optimizer_lr, weight_decay=0.0)

    def get_scheduler_preset(self) -> None:
        return None

    def validate_features(self) -> None:
        if self.robot_state_feature is None or self.action_feature is None:
            raise ValueError('two_head needs observation.state among the input features and '
                             'action among the output features')
        for key, feature in ((k, f) for k, f in (('observation.state', self.robot_state_feature),
                                                  ('action', self.action_feature))):
            if tuple(feature.shape) != (len(self.joint_names),):
                raise ValueError(f'{key} has shape {tuple(feature.shape)}, expected '
                                 f'({len(self.joint_names)},) for joints {self.joint_names}')

    @property
    def observation_delta_indices(self) -> None:
        return None

    @property
    def action_delta_indices(self) -> list[int]:
        return list(range(self.chunk_size))

    @property
    def reward_delta_indices(self) -> None:
        return None
