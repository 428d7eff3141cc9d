"""The `transformers` planner backend with real tiny checkpoints built and trained offline."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from lerobot_lang_nodes.testing import planner_config
from lerobot_lang_nodes.core import prompts
from lerobot_lang_nodes.core.high_level import HighLevelConfig, HighLevelPlanner
from lerobot_lang_nodes.core.language import LanguageState
from lerobot_lang_nodes.testing import require_ml

require_ml('transformers')
from lerobot_lang_nodes.backends.planners.transformers_planner import (  # noqa: E402
    GenerationTimeout, ModelLoadError, TransformersPlanner, inspect_checkpoint)
from lerobot_lang_nodes.tiny_models import vlm  # noqa: E402

TEMPLATES = {'system_prompt': 'You plan the steps of a robot arm.',
             'subtask': '{task}\nPlan: {plan}\nCurrent subtask: {subtask}\nNext subtask?'}
RED = vlm.scene_steps('red')


@pytest.fixture(scope='module')
def prompts_file(tmp_path_factory):
    import yaml
    path = tmp_path_factory.mktemp('prompts') / 'prompts.yaml'
    path.write_text(yaml.safe_dump(TEMPLATES))
    return path


@pytest.fixture(scope='module')
def templates(prompts_file):
    return prompts.load_templates(prompts_file)


@pytest.fixture(scope='module')
def scene_model(tmp_path_factory, templates, monkeypatch_module):
    """A tiny Idefics3 trained on the scene's planner runs and two VQA scenes."""
    examples = vlm.scene_planner_examples(templates) + vlm.scene_vqa_examples(templates)
    return vlm.build_trained_vlm(tmp_path_factory.mktemp('vlm') / 'model', examples,
                                 system_prompt=templates.system_prompt, steps=400)


@pytest.fixture(scope='module')
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv('HF_HUB_OFFLINE', '1')
        yield mp


def config(model_path, prompts_file, **kw):
    base = dict(model_path=str(model_path), device='cpu', image_size=32, max_new_tokens=24,
                generation_timeout_s=20.0, prompts_file=str(prompts_file))
    base.update(kw)
    return planner_config(**base)


@pytest.fixture(scope='module')
def planner(scene_model, prompts_file):
    return TransformersPlanner(config(scene_model, prompts_file))


# --- load failures name what is missing ---------------------------------------------------
def _copy_without(src, dst, *names):
    shutil.copytree(src, dst)
    for name in names:
        (dst / name).unlink()
    return dst


def test_missing_or_incomplete_checkpoints_name_what_is_missing(scene_model, tmp_path,
                                                                prompts_file):
    cases = [
        ('', 'model_path is empty'),
        (str(tmp_path / 'nowhere'), 'does not exist'),
        (str(_copy_without(scene_model, tmp_path / 'a', 'config.json')), 'no config.json'),
        (str(_copy_without(scene_model, tmp_path / 'b', 'model.safetensors')), 'no weights'),
        (str(_copy_without(scene_model, tmp_path / 'c', 'tokenizer.json',
                           'tokenizer_config.json')), 'no tokenizer'),
        (str(_copy_without(scene_model, tmp_path / 'd', 'processor_config.json')),
         'no image processor'),
    ]
    corrupt = shutil.copytree(scene_model, tmp_path / 'e')
    (corrupt / 'config.json').write_text('{"model_type": "idefics3", ')
    cases.append((str(corrupt), 'not valid JSON'))
    alien = shutil.copytree(scene_model, tmp_path / 'f')
    (alien / 'config.json').write_text(json.dumps({'model_type': 'vit'}))
    cases.append((str(alien), "unsupported architecture 'vit'"))
    for path, expected in cases:
        with pytest.raises(ModelLoadError, match=expected):
            TransformersPlanner(config(path, prompts_file))


def test_corrupt_weights_fail_with_the_path(scene_model, tmp_path, prompts_file):
    broken = shutil.copytree(scene_model, tmp_path / 'w')
    (broken / 'model.safetensors').write_bytes(b'not a safetensors file')
    with pytest.raises(ModelLoadError, match='loading the weights of .* failed'):
        TransformersPlanner(config(broken, prompts_file))


def test_gguf_file_must_exist_and_is_text_only(tmp_path):
    with pytest.raises(ModelLoadError, match="GGUF file 'x.gguf' not found"):
        inspect_checkpoint(str(tmp_path), gguf_file='x.gguf')
    with pytest.raises(ModelLoadError, match='text-only'):
        inspect_checkpoint(str(tmp_path), gguf_file='x.gguf', model_kind='vlm')


def test_model_kind_follows_the_config(scene_model):
    assert inspect_checkpoint(str(scene_model)).kind == 'vlm'
    with pytest.raises(ModelLoadError, match='unsupported architecture'):
        inspect_checkpoint(str(scene_model), model_kind='text')


# --- generation ----------------------------------------------------------------------------
def test_trained_answers_come_back_exactly_and_greedy_is_deterministic(planner, templates):
    examples = vlm.scene_planner_examples(templates) + vlm.scene_vqa_examples(templates)
    for messages, target in examples:
        kind = 'vqa' if isinstance(messages[0]['content'], list) else 'subtask'
        first = planner.generate(kind, messages, None)
        assert first == target
        assert planner.generate(kind, messages, None) == first


def test_vqa_depends_on_the_image(planner, templates):
    red, blue = vlm.scene_vqa_examples(templates)
    assert planner.generate('vqa', red[0], None) == 'the red cube'
    assert planner.generate('vqa', blue[0], None) == 'the blue cube'


def test_max_new_tokens_bounds_the_output(scene_model, prompts_file, templates):
    short = TransformersPlanner(config(scene_model, prompts_file, max_new_tokens=2))
    messages = prompts.subtask_messages(vlm.SCENE_TASK, templates=templates)
    out = short.generate('subtask', messages, None)
    assert out and len(short.tokenizer(out, add_special_tokens=False)['input_ids']) <= 2
    assert 'reach the red cube'.startswith(out)


def test_special_tokens_are_stripped_and_say_is_split(planner, templates):
    state = LanguageState()
    core = HighLevelPlanner(planner, state, HighLevelConfig(), templates)
    core.set_task(vlm.SCENE_TASK)
    assert core.regenerate(0.0) == 'changed'
    plan, speech = core.interject(vlm.SCENE_INTERJECTION)
    raw = core.last_raw['interjection']
    assert '<end_of_utterance>' not in raw and '<|im_start|>' not in raw
    assert (plan, speech) == ('put the blue cube in the bowl', 'OK, I will use the blue cube.')


def test_a_real_model_replans_from_the_plan_in_the_subtask_prompt(planner, templates):
    state = LanguageState()
    core = HighLevelPlanner(planner, state, HighLevelConfig(), templates)
    core.set_task(vlm.SCENE_TASK)
    core.regenerate(0.0)
    core.regenerate(1.0)
    assert (state.subtask, state.memory) == (RED[1], 'reached the red cube')
    core.interject(vlm.SCENE_INTERJECTION)
    assert state.plan == 'put the blue cube in the bowl'
    core.regenerate(2.0)
    assert state.subtask == 'reach the blue cube'
    assert core.stats()['failures.subtask'] == 0
    # The prompt that re-planned carried the plan line.
    prompt = prompts.subtask_messages(state.task, state.plan, state.memory, RED[1], '',
                                      templates)[0]['content']
    assert 'Plan: put the blue cube in the bowl' in prompt


def test_timeout_is_counted_and_the_subtask_stays(scene_model, prompts_file, templates):
    slow = TransformersPlanner(config(scene_model, prompts_file, generation_timeout_s=1e-6))
    with pytest.raises(GenerationTimeout, match='generation_timeout_s'):
        slow.generate('subtask', prompts.subtask_messages(vlm.SCENE_TASK,
                                                          templates=templates), None)
    state = LanguageState()
    core = HighLevelPlanner(slow, state, HighLevelConfig(), templates)
    core.set_task(vlm.SCENE_TASK)
    state.set_subtask(RED[0], source='planner')
    assert core.regenerate(0.0) == 'failed'
    stats = core.stats()
    assert (stats['timeouts.subtask'], stats['failures.subtask']) == (1, 1)
    assert state.subtask == RED[0]  # the active subtask stays valid
    assert stats['latency_last_s.subtask'] > 0


def test_frames_of_image_cameras_reach_the_subtask_prompt(planner, templates):
    messages = prompts.subtask_messages(vlm.SCENE_TASK, templates=templates)
    obs = {'images': {'front': vlm.scene_image('red'), 'wrist': vlm.scene_image('blue')}}
    with_frames = planner._with_frames('subtask', messages, obs)
    images = [p for p in with_frames[0]['content'] if p['type'] == 'image']
    assert [p['camera'] for p in images] == ['front']
    inputs = planner.encode(with_frames)
    assert tuple(inputs['pixel_values'].shape[-2:]) == (32, 32)
    assert 'pixel_values' not in planner.encode(messages)
    assert planner._with_frames('memory', messages, obs) == messages


# --- constrained mode ----------------------------------------------------------------------
def test_constrained_mode_picks_the_trained_candidate_and_reports_scores(
        scene_model, prompts_file, templates, tmp_path):
    extra = tmp_path / 'skills.txt'
    extra.write_text('# more skills\nrelease the red cube\nwave\n')
    constrained = TransformersPlanner(config(scene_model, prompts_file,
                                             candidates=tuple(RED[:4]) + ('reach the bowl',),
                                             candidates_file=str(extra)))
    assert constrained.candidates == RED[:4] + ['reach the bowl', RED[4], 'wave']
    messages = prompts.subtask_messages(vlm.SCENE_TASK, subtask=RED[1], templates=templates)
    assert constrained.generate('subtask', messages, None) == RED[2]
    scores = constrained.last_scores
    assert set(scores) == set(constrained.candidates)
    assert max(scores, key=scores.get) == RED[2]
    assert all(s <= 0 for s in scores.values())
    reported = json.loads(constrained.diagnostics()['last_scores'])
    assert max(reported, key=reported.get) == RED[2]
    # Other kinds are still generated freely.
    assert constrained.generate('memory', prompts.memory_messages(vlm.SCENE_TASK, '', '',
                                                                  templates), None) == \
        vlm.FIRST_MEMORY


# --- text-only mode ------------------------------------------------------------------------
def test_text_only_checkpoint_generates_and_refuses_images(tmp_path, prompts_file):
    path = vlm.build_tiny_text_lm(tmp_path / 'lm', vlm.example_texts(
        vlm.scene_planner_examples()))
    text = TransformersPlanner(config(path, prompts_file, max_new_tokens=4, min_new_tokens=4))
    assert text.checkpoint.kind == 'text'
    messages = prompts.subtask_messages(vlm.SCENE_TASK)
    out = text.generate('subtask', messages, None)
    # The model's own greedy continuation of the chat-templated prompt: four tokens (no end
    # of turn before min_new_tokens), decoded.
    import torch
    ids, new = text.encode(messages)['input_ids'], []
    with torch.inference_mode():
        for _ in range(4):
            logits = text.model(input_ids=ids).logits[0, -1]
            logits[text.eos_ids] = -float('inf')
            new.append(int(logits.argmax()))
            ids = torch.cat([ids, torch.tensor([[new[-1]]])], dim=1)
    assert out and out == text.tokenizer.decode(new, skip_special_tokens=True).strip()
    core = HighLevelPlanner(text, LanguageState())
    image = np.zeros((8, 8, 3), np.uint8)
    assert core.answer_vqa('what do you see?', image, 'front') == ''
    assert core.failures == {'vqa': 1}
