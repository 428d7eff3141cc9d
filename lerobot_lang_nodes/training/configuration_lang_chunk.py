"""LeRobot config of `lang_chunk`: the project's small language-conditioned action-chunk policy.

Why a policy type of the project's own: the `lerobot` policy backend conditions a checkpoint on
the active subtask through the batch's ``task`` text, and in the simulator that text is what
names the cube ("reach the red cube"), so a text-blind policy cannot choose it. LeRobot 0.6's
policies that read ``task`` load their tokenizer or text tower from the hub (SmolVLA: SmolVLM2,
PI0 / PI0.5: the PaliGemma tokenizer, X-VLA: BART's tokenizer, Multi-task DiT: CLIP), which
is not available offline, and ACT / Diffusion / VQ-BeT ignore ``task``. `lang_chunk` needs no
downloaded weight: a few conv layers over small images, a hashed bag of words for the text,
ACT-style chunks.

Registered with LeRobot's config registry like LeRobot's own policies (as the project's
`two_head` is), and named by LeRobot's convention (configuration_ / modeling_ / processor_
lang_chunk), so `PreTrainedConfig.from_pretrained`, `get_policy_class('lang_chunk')` and
`make_pre_post_processors` handle it once this module has been imported. LeRobot learns of a
type only by such an import, so a process that loads a `lang_chunk` checkpoint must import
this module first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lerobot.configs import NormalizationMode, PreTrainedConfig
from lerobot.optim import AdamWConfig, CosineDecayWithWarmupSchedulerConfig

POLICY_TYPE = 'lang_chunk'


@PreTrainedConfig.register_subclass(POLICY_TYPE)
@dataclass
class LangChunkConfig(PreTrainedConfig):
    """Images + joint state + instruction text -> a chunk of ``chunk_size`` joint targets.

    The image shapes of ``input_features`` are the (small) shapes the model runs at: LeRobot's
    policy backend resizes camera frames to them, and the trainer resizes dataset frames with
    the same bilinear, antialiased interpolation. State and actions are in the dataset's units
    (LeRobot's SO-101 units for the `lerobot` backend), in ``action_feature_names`` order.
    """

    chunk_size: int = 20
    n_action_steps: int = 20
    # The dataset's action names ('shoulder_pan.pos', ...): the backend orders joints by them.
    action_feature_names: list[str] | None = None
    # Image encoder: one 3x3 conv per entry (stride from conv_strides, 2 when not given),
    # shared by every camera.
    conv_channels: list[int] = field(default_factory=lambda: [16, 32, 32, 32])
    conv_strides: list[int] | None = None
    # Also feed the head each channel's expected (x, y) on the last feature map (spatial
    # softmax keypoints, as robomimic and Diffusion Policy do): sub-cell positions, where the
    # pooled grid only says which cell. Off in checkpoints written before it existed.
    image_keypoints: bool = False
    # Predict each chunk step as an offset from the current joint state (scaled by the spread
    # of such offsets in the data) instead of an absolute target: a reach that must end within
    # millimetres then needs a small correct offset, not one absolute angle out of the whole
    # workspace's range. Needs the state and the action to be the same joints.
    relative_actions: bool = False
    # The last feature map is average-pooled to this grid (rows, columns) and flattened, so the
    # head still knows where things are (which side the named cube is on).
    image_grid: list[int] = field(default_factory=lambda: [3, 4])
    # Text: unigrams and word n-grams up to text_ngrams, hashed (CRC-32) into text_buckets.
    text_buckets: int = 4096
    text_ngrams: int = 2
    dim_model: int = 128
    hidden_dim: int = 256
    dropout: float = 0.1
    normalization_mapping: dict[str, NormalizationMode] = field(default_factory=lambda: {
        'VISUAL': NormalizationMode.MEAN_STD,
        'STATE': NormalizationMode.MEAN_STD,
        'ACTION': NormalizationMode.MEAN_STD,
    })
    # Training presets (LeRobot's AdamW and cosine decay with warm-up; the schedule is scaled
    # down to the number of steps actually run).
    optimizer_lr: float = 1e-3
    optimizer_weight_decay: float = 1e-4
    optimizer_grad_clip_norm: float = 10.0
    scheduler_warmup_steps: int = 500
    scheduler_decay_steps: int = 30000
    scheduler_decay_lr: float = 1e-5

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_action_steps > self.chunk_size:
            raise ValueError(f'n_action_steps={self.n_action_steps} exceeds chunk_size='
                             f'{self.chunk_size}; lower n_action_steps')
        if self.chunk_size < 1 or self.n_action_steps < 1:
            raise ValueError('chunk_size and n_action_steps must be >= 1')
        if not self.conv_channels or min(self.conv_channels) < 1:
            raise ValueError(f'conv_channels must be positive numbers, got {self.conv_channels}')
        strides = self.conv_strides
        if strides is not None and (len(strides) != len(self.conv_channels)
                                    or min(strides) < 1):
            raise ValueError(f'conv_strides must give one stride >= 1 per conv_channels entry, '
                             f'got {strides} for {self.conv_channels}')
        if len(self.image_grid) != 2 or min(self.image_grid) < 1:
            raise ValueError(f'image_grid must be [rows, columns], got {self.image_grid}')
        if self.text_buckets < 2 or self.text_ngrams < 1:
            raise ValueError('text_buckets must be >= 2 and text_ngrams >= 1')

    def get_optimizer_preset(self) -> AdamWConfig:
        return AdamWConfig(lr=self.optimizer_lr, weight_decay=self.optimizer_weight_decay,
                           grad_clip_norm=self.optimizer_grad_clip_norm)

    def get_scheduler_preset(self) -> CosineDecayWithWarmupSchedulerConfig:
        return CosineDecayWithWarmupSchedulerConfig(
            num_warmup_steps=self.scheduler_warmup_steps,
            num_decay_steps=self.scheduler_decay_steps, peak_lr=self.optimizer_lr,
            decay_lr=self.scheduler_decay_lr)

    def validate_features(self) -> None:
        if self.robot_state_feature is None or self.action_feature is None:
            raise ValueError('lang_chunk needs observation.state among the input features and '
                             'action among the output features')
        for key, ft in self.image_features.items():
            if len(ft.shape) != 3 or ft.shape[0] != 3:
                raise ValueError(f'{key} has shape {tuple(ft.shape)}; expected (3, H, W)')
        if self.relative_actions and (self.robot_state_feature.shape
                                      != self.action_feature.shape):
            raise ValueError(f'relative_actions needs the state and the action to be the same '
                             f'joints; got {tuple(self.robot_state_feature.shape)} and '
                             f'{tuple(self.action_feature.shape)}')
        names = self.action_feature_names
        if names is not None and len(names) != self.action_feature.shape[0]:
            raise ValueError(f'action_feature_names has {len(names)} names for an action of '
                             f'shape {tuple(self.action_feature.shape)}')

    @property
    def observation_delta_indices(self) -> None:
        return None

    @property
    def action_delta_indices(self) -> list[int]:
        return list(range(self.chunk_size))

    @property
    def reward_delta_indices(self) -> None:
        return None
