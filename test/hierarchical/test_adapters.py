"""Adapter registry, shared loading and the two backends on real tiny LeRobot checkpoints."""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lerobot_lang_nodes.testing import require_ml

require_ml()

from lerobot_lang_nodes.core import prompts  # noqa: E402
from lerobot_lang_nodes.core.language import LanguageState  # noqa: E402
from lerobot_lang_nodes.hierarchical import backends, loading, registry  # noqa: E402
from lerobot_lang_nodes.hierarchical.adapter import (AdapterState,  # noqa: E402
                                                     DirectTaskPolicyAdapter, NoTextHead)
from lerobot_lang_nodes.backends.policies import lerobot_policy as lp  # noqa: E402
from lerobot_lang_nodes.tiny_models import two_head as th  # noqa: E402

JOINTS = ['shoulder_pan', 'shoulder_lift', 'elbow_flex', 'wrist_flex', 'wrist_roll', 'gripper']


def _observation(instruction: str, rng: np.random.Generator, image_hw=(240, 320)) -> dict:
    return {'instruction': instruction, 'joint_names': list(reversed(JOINTS)),
            'joint_positions': rng.uniform(-1.0, 1.0, 6),
            'images': {'front': rng.integers(0, 256, (*image_hw, 3), dtype=np.uint8)}}


def _cfg(path: Path, **overrides) -> SimpleNamespace:
    """What both hierarchical backends read of their node's parameters."""
    from lerobot_lang_nodes.backends.policies.lerobot_policy import LeRobotConfig
    values = dict(model_path=str(path), device='cpu', dtype='auto', max_new_tokens=0,
                  min_new_tokens=0, temperature=0.0, top_p=1.0, lerobot=LeRobotConfig())
    return SimpleNamespace(**{**values, **overrides})


# --- registry -------------------------------------------------------------------------------
def test_registry_maps_policy_types_to_adapter_classes():
    assert registry.adapter_class('act') is DirectTaskPolicyAdapter
    assert registry.adapter_class('two_head').__name__ == 'TwoHeadAdapter'


def test_unknown_policy_type_names_the_registered_types():
    with pytest.raises(registry.AdapterNotFound) as err:
        registry.adapter_class('no_such_policy')
    text = str(err.value)
    assert "'no_such_policy'" in text and "'two_head'" in text and "'act'" in text
    assert registry.ENTRY_POINT_GROUP in text


def test_an_installed_entry_point_registers_a_third_party_adapter(tmp_path, monkeypatch):
    # A real (metadata-only) installed distribution on sys.path, as `pip install` leaves it.
    (tmp_path / 'my_adapters').mkdir()
    (tmp_path / 'my_adapters' / '__init__.py').write_text(
        'from lerobot_lang_nodes.hierarchical.adapter import DirectTaskPolicyAdapter\n'
        'class MyAdapter(DirectTaskPolicyAdapter):\n    pass\n')
    info = tmp_path / 'my_adapters-0.1.dist-info'
    info.mkdir()
    (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: my-adapters\nVersion: 0.1\n')
    (info / 'entry_points.txt').write_text(
        f'[{registry.ENTRY_POINT_GROUP}]\nmy_policy = my_adapters:MyAdapter\n'
        'broken_policy = my_adapters.missing:Nope\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, 'my_adapters', raising=False)
    assert registry.registered()['my_policy'] == 'my_adapters:MyAdapter'
    cls = registry.adapter_class('my_policy')
    assert cls.__name__ == 'MyAdapter' and issubclass(cls, DirectTaskPolicyAdapter)
    with pytest.raises(registry.AdapterNotFound, match='my_adapters.missing'):
        registry.adapter_class('broken_policy')


def test_an_entry_point_replaces_a_built_in_adapter():
    ep = importlib.metadata.EntryPoint(name='act', group=registry.ENTRY_POINT_GROUP,
                                       value='lerobot_lang_nodes.hierarchical.two_head_adapter:'
                                             'TwoHeadAdapter')
    assert registry.adapter_class('act', entry_points=[ep]).__name__ == 'TwoHeadAdapter'
    assert registry.adapter_class('act', entry_points=[]) is DirectTaskPolicyAdapter


def test_policy_type_is_read_from_the_checkpoint(tmp_path):
    with pytest.raises(FileNotFoundError, match='not a directory'):
        registry.read_policy_type(tmp_path / 'missing')
    with pytest.raises(FileNotFoundError, match='no config.json'):
        registry.read_policy_type(tmp_path)
    (tmp_path / 'config.json').write_text(json.dumps({'chunk_size': 3}))
    with pytest.raises(ValueError, match='no "type"'):
        registry.read_policy_type(tmp_path)
    (tmp_path / 'config.json').write_text(json.dumps({'type': 'act'}))
    assert registry.read_policy_type(tmp_path) == 'act'


# --- the two-headed checkpoint ----------------------------------------------------------------
def test_two_head_checkpoint_loads_through_lerobots_factory(two_head_dir):
    from lerobot.configs import PreTrainedConfig
    from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    from lerobot_lang_nodes.hierarchical.configuration_two_head import TwoHeadConfig
    cfg = PreTrainedConfig.from_pretrained(two_head_dir)  # the import above registered the type
    assert isinstance(cfg, TwoHeadConfig)
    assert cfg.type == 'two_head'
    policy = get_policy_class(cfg.type).from_pretrained(two_head_dir, config=cfg)
    assert type(policy).__name__ == 'TwoHeadPolicy' and not policy.training
    pre, post = make_pre_post_processors(cfg, pretrained_path=str(two_head_dir))
    assert pre is not None and post is not None
    from lerobot_lang_nodes.hierarchical.modeling_two_head import render_prompt
    assert policy.select_message(render_prompt('subtask', th.TASK)) == th.SUBTASK


def test_planner_and_policy_share_one_load_and_both_heads_work(two_head_dir, tmp_path):
    link = tmp_path / 'same_checkpoint'  # another spelling of the same directory
    link.symlink_to(two_head_dir)
    before = loading.load_count(str(two_head_dir))
    planner = backends.HierarchicalPlanner(_cfg(two_head_dir))
    policy = backends.HierarchicalPolicy(_cfg(link))
    try:
        assert loading.load_count(str(two_head_dir)) == before + 1
        assert planner.adapter is policy.adapter
        assert planner.shared_model.users == {'planner', 'policy'}

        state = LanguageState()
        state.set_task(th.TASK)
        obs = {'language': state.snapshot()}
        assert planner.generate('subtask', prompts.subtask_messages(th.TASK), obs) == th.SUBTASK
        # The memory turns come from the core's builder; the snapshot may predate the change.
        assert planner.generate('memory', prompts.memory_messages(th.TASK, '', ''),
                                obs) == th.MEMORY
        assert planner.generate('memory', prompts.memory_messages(th.TASK, th.MEMORY,
                                                                  th.SUBTASK),
                                obs) == th.NEW_MEMORY
        reply = planner.generate('interjection',
                                 prompts.interjection_messages(th.TASK, th.INTERJECTION), obs)
        assert reply == f'{th.NEW_PLAN} <say>{th.SPEECH}</say>'
        state.set_plan(th.NEW_PLAN)
        assert planner.generate('subtask', prompts.subtask_messages(th.TASK),
                                {'language': state.snapshot()}) == th.NEW_SUBTASK
        with pytest.raises(NoTextHead, match='vqa'):
            planner.generate('vqa', prompts.vqa_messages('what?', np.zeros((4, 4, 3))), obs)

        rng = np.random.default_rng(0)
        assert policy.action_names == tuple(JOINTS)
        for instruction in (th.SUBTASK, th.NEW_SUBTASK):
            chunk = policy.infer(_observation(instruction, rng))
            assert chunk.shape == (10, 6)
            np.testing.assert_allclose(chunk, np.tile(th.POSES[instruction], (10, 1)),
                                       atol=0.08)
    finally:
        policy.close()
        planner.close()
    assert all(m.key[0] != str(two_head_dir.resolve()) for m in loading.loaded())


def test_other_device_or_dtype_is_another_model(two_head_dir):
    before = loading.load_count(str(two_head_dir))
    a = backends.HierarchicalPolicy(_cfg(two_head_dir))
    b = backends.HierarchicalPolicy(_cfg(two_head_dir, dtype='bfloat16'))
    try:
        assert a.adapter is not b.adapter
        assert loading.load_count(str(two_head_dir)) == before + 2
        chunk = b.infer(_observation(th.SUBTASK, np.random.default_rng(1)))
        np.testing.assert_allclose(chunk, np.tile(th.POSES[th.SUBTASK], (10, 1)), atol=0.2)
    finally:
        a.close()
        b.close()


def test_missing_checkpoint_fails_with_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match='no config.json'):
        backends.HierarchicalPlanner(_cfg(tmp_path))
    with pytest.raises(ValueError, match='model_path is empty'):
        backends.HierarchicalPolicy(_cfg(Path(), model_path=''))


# --- a flat LeRobot policy through DirectTaskPolicyAdapter --------------------------------------
@pytest.fixture(scope='module')
def tiny_act_dir(tmp_path_factory) -> Path:
    import torch
    from lerobot.configs import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors
    torch.manual_seed(0)
    cfg = ACTConfig(
        device='cpu', chunk_size=8, n_action_steps=8, dim_model=32, n_heads=2,
        dim_feedforward=64, n_encoder_layers=1, n_decoder_layers=1, use_vae=False,
        pretrained_backbone_weights=None,
        input_features={'observation.state': PolicyFeature(FeatureType.STATE, (6,)),
                        'observation.images.front': PolicyFeature(FeatureType.VISUAL,
                                                                 (3, 96, 128))},
        output_features={'action': PolicyFeature(FeatureType.ACTION, (6,))})
    stats = {'observation.state': {'mean': torch.zeros(6), 'std': torch.ones(6)},
             'observation.images.front': {'mean': torch.full((3, 1, 1), 0.5),
                                          'std': torch.full((3, 1, 1), 0.25)},
             'action': {'mean': torch.zeros(6), 'std': torch.ones(6)}}
    out = tmp_path_factory.mktemp('act') / 'checkpoint'
    ACTPolicy(cfg).save_pretrained(out)
    pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
    pre.save_pretrained(out)
    post.save_pretrained(out)
    return out


def test_direct_task_adapter_runs_a_tiny_act_checkpoint(tiny_act_dir):
    assert registry.read_policy_type(tiny_act_dir) == 'act'
    policy = backends.HierarchicalPolicy(_cfg(tiny_act_dir))
    try:
        adapter = policy.adapter
        assert type(adapter) is DirectTaskPolicyAdapter and adapter.policy_type == 'act'
        obs = _observation('pick up the red cube', np.random.default_rng(2), (96, 128))
        chunk = policy.infer(obs)
        assert chunk.shape == (8, 6) and np.all(np.isfinite(chunk))
        # The same frame straight through LeRobot's pipeline gives the same chunk: a stock
        # checkpoint is in LeRobot's SO-101 units (degrees here; the simulator's nominal
        # calibration), the node's in radians.
        assert adapter.joint_units == 'lerobot'
        calibration, zero = lp.nominal_sim_calibration()
        units = lp.StateUnits(calibration, 'degrees', adapter.action_names, zero)
        names = obs['joint_names']
        radians = np.array([obs['joint_positions'][names.index(j)]
                            for j in adapter.action_names])
        lerobot_obs = {**obs, 'joint_names': list(adapter.action_names),
                       'joint_positions': units.to_lerobot(radians)}
        again = adapter.select_action(lerobot_obs, AdapterState(task='pick up the red cube'))
        np.testing.assert_allclose(chunk, units.to_radians(again), rtol=1e-5, atol=1e-6)
        with pytest.raises(NoTextHead, match="'act' is a flat policy"):
            adapter.generate_text('subtask', None, AdapterState(task='x'))
        del obs['images']['front']
        with pytest.raises(RuntimeError, match="no image from camera 'front'"):
            policy.infer(obs)
    finally:
        policy.close()


def test_direct_task_adapter_runs_a_smolvla_checkpoint(tmp_path):
    """A flat VLA (SmolVLA from stock LeRobot classes) through the hierarchical backend:
    the instruction reaches the model through its own tokenizer step."""
    import torch

    from lerobot_lang_nodes.tiny_models.vla import build_smolvla
    path = build_smolvla(tmp_path / 'smolvla', chunk_size=16, n_action_steps=8,
                         cameras=('front',))
    assert registry.read_policy_type(path) == 'smolvla'
    policy = backends.HierarchicalPolicy(_cfg(path))
    try:
        assert type(policy.adapter) is DirectTaskPolicyAdapter
        chunks = {}
        for text in ('pick up the red cube', 'open the gripper'):
            torch.manual_seed(0)
            chunks[text] = policy.infer(_observation(text, np.random.default_rng(2)))
        first, other = chunks.values()
        assert first.shape == (8, 6) and np.all(np.isfinite(first))
        assert np.abs(first - other).max() > 1e-6
        with pytest.raises(NoTextHead, match="'smolvla' is a flat policy"):
            policy.adapter.generate_text('subtask', None, AdapterState(task='x'))
    finally:
        policy.close()
