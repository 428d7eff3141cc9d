"""Training from an exported dataset: the policy and the planner, loaded by the project's own
backends exactly as a user's checkpoints are.

The dataset is made the way a user makes one: a session written as a real rosbag2 bag (the
recorder's writer, test/recording/synthetic.py) and exported by `lerobot-lang export` with
--units lerobot. Two episodes, "put the red cube in the bowl" and "put the blue cube in the
bowl", each with the subtasks "reach the <colour> cube" then "grasp the <colour> cube". The
front camera shows both cubes in both episodes and a bar that is bright while reaching and dark
while grasping; the arm's state never changes. So only the subtask text tells the colour (the
policy must read it to move the pan joint to +0.4 rad for red, -0.4 rad for blue) and only the
image tells the phase (the planner must look to answer reach or grasp). The red episode also
has an interjection answered with speech and a new plan.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lerobot_lang_nodes.testing import planner_config, policy_config
from lerobot_lang_nodes.cli import main as cli
from lerobot_lang_nodes.testing import require_ml
from lerobot_lang_nodes.training import planner as planner_training
from lerobot_lang_nodes.training import policy as policy_training

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'recording'))
from synthetic import JOINTS, T0, Session  # noqa: E402

FPS = 15
EPISODE_S = 3.0
SWITCH_S = 1.5  # reach -> grasp
PAN = {'red': 0.4, 'blue': -0.4}  # shoulder_pan target (rad) while working on that cube
GRIPPER_CLOSED = 0.2
# The trainers as a user runs them: `lerobot-lang train-policy|train-planner ...`.
POLICY_CLI = SimpleNamespace(main=lambda argv: cli.main(['train-policy', *argv]))
PLANNER_CLI = SimpleNamespace(main=lambda argv: cli.main(['train-planner', *argv]))
INTERJECTION = ('do it gently', 'OK, gently.', 'put the red cube in the bowl gently')
POLICY_STEPS = 300
PLANNER_STEPS = 300


def task_of(colour: str) -> str:
    return f'put the {colour} cube in the bowl'


def scene(phase: int, scale: int = 1) -> np.ndarray:
    """Front view, 48x64 times ``scale``: grey table, red cube left, blue cube right, and the
    gripper bar on top (bright while reaching, dark while grasping)."""
    img = np.full((48, 64, 3), 140, np.uint8)
    img[18:30, 8:20] = (200, 30, 30)
    img[18:30, 44:56] = (30, 60, 210)
    img[:10, :] = 235 if phase == 0 else 25
    return np.repeat(np.repeat(img, scale, axis=0), scale, axis=1)


def wrist(phase: int, scale: int = 1) -> np.ndarray:
    return np.full((48 * scale, 64 * scale, 3), 70 if phase == 0 else 180, np.uint8)


class PictureSession(Session):
    """The synthetic session with drawn camera frames."""

    def picture(self, t: float, cam: str, img: np.ndarray) -> None:
        Image = self.store.types['sensor_msgs/msg/Image']
        h, w, _ = img.shape
        self.add(t, f'/cameras/{cam}/image_raw',
                 Image(header=self._header(t), height=h, width=w, encoding='rgb8',
                       is_bigendian=0, step=w * 3, data=img.reshape(-1).copy()))


def two_task_session() -> PictureSession:
    s = PictureSession()
    period = 1 / 30
    revision = 0
    for ep, colour in enumerate(('red', 'blue')):
        t0 = T0 + ep * (EPISODE_S + 1.0)
        task = task_of(colour)
        reach, grasp = f'reach the {colour} cube', f'grasp the {colour} cube'
        revision += 1
        s.context(t0, task, reach, 'nothing done yet', '', revision)
        revision += 1
        s.context(t0 + SWITCH_S, task, grasp, f'reached the {colour} cube', '', revision)
        # Samples land 2-3 ms before the frame grid (as in synthetic.standard_session).
        for i in range(int(EPISODE_S * 30) + 1):
            s.joints(t0 + i * period - (0.002 if i else 0.0), np.zeros(len(JOINTS)))
        for k in range(int(EPISODE_S * 10) + 1):
            t = t0 + k * 0.1 - (0.003 if k else 0.0)
            phase = int(k * 0.1 >= SWITCH_S)  # the camera shows the grasp when it begins
            s.picture(t, 'front', scene(phase))
            s.picture(t, 'wrist', wrist(phase))
        for c in range(int(EPISODE_S * 4)):
            t = t0 + c * 0.25 + 0.005
            steps = np.zeros((10, len(JOINTS)))
            steps[:, 0] = PAN[colour]
            grasping = t - t0 >= SWITCH_S
            steps[:, 5] = GRIPPER_CLOSED if grasping else 0.0
            s.chunk(t, steps, revision=revision - (0 if grasping else 1), period=period)
        if colour == 'red':
            text, speech, plan = INTERJECTION
            s.string(t0 + 2.2, '/interjection', text)
            s.string(t0 + 2.3, '/speech', speech)
            s.context(t0 + 2.3, task, grasp, f'reached the {colour} cube', plan, revision)
    return s


def test_importing_the_trainers_does_not_import_torch():
    code = ('import sys, lerobot_lang_nodes.training, lerobot_lang_nodes.training.data, '
            'lerobot_lang_nodes.training.policy, lerobot_lang_nodes.training.planner; '
            "heavy = [m for m in ('torch', 'lerobot', 'transformers') if m in sys.modules]; "
            'print(heavy); sys.exit(1 if heavy else 0)')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                         timeout=60, env={**os.environ, 'HF_HUB_OFFLINE': '1'})
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize('trainer', [POLICY_CLI, PLANNER_CLI])
def test_a_missing_or_incomplete_dataset_folder_is_a_clear_error(trainer, tmp_path, capsys):
    missing = tmp_path / 'no_such_dataset'
    assert trainer.main([str(missing), str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and 'does not exist' in err
    incomplete = tmp_path / 'incomplete'
    (incomplete / 'meta').mkdir(parents=True)
    (incomplete / 'meta/info.json').write_text('{}')
    assert trainer.main([str(incomplete), str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert str(incomplete) in err and 'meta/stats.json' in err and 'data/' in err
    assert not (tmp_path / 'out').exists()


@pytest.mark.parametrize('trainer, argv, message', [
    (POLICY_CLI, ['--shift-pixels', '-1'], 'shift_pixels must be >= 0'),
    (PLANNER_CLI, ['--vision-size', '48'], 'vision_size must be a multiple of 32'),
    (PLANNER_CLI, ['--change-frames', '-1'], 'change_frames must be >= 0'),
])
def test_bad_image_settings_are_refused_before_any_work(trainer, argv, message, tmp_path,
                                                        capsys):
    assert trainer.main([str(tmp_path / 'no_such_dataset'), str(tmp_path / 'out'),
                         *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / 'out').exists()


def _fake_dataset(root: Path, names: list[str]) -> Path:
    """The layout and info.json of a dataset, without data (enough for the checks)."""
    for d in ('meta/episodes', 'data'):
        (root / d).mkdir(parents=True)
    for f in ('meta/stats.json', 'meta/tasks.parquet'):
        (root / f).write_text('')
    vector = {'dtype': 'float32', 'shape': [6], 'names': names}
    (root / 'meta/info.json').write_text(json.dumps({
        'codebase_version': 'v3.0', 'fps': 30, 'total_frames': 10, 'total_episodes': 1,
        'features': {'observation.state': vector, 'action': vector,
                     'observation.images.front': {'dtype': 'video', 'shape': [48, 64, 3],
                                                  'names': ['height', 'width', 'channels']}}}))
    return root


def test_policy_training_refuses_radians_and_the_planner_needs_language(tmp_path, capsys):
    radians = _fake_dataset(tmp_path / 'radians', list(JOINTS))
    assert POLICY_CLI.main([str(radians), str(tmp_path / 'out')]) == 2
    assert '--units lerobot' in capsys.readouterr().err
    no_language = _fake_dataset(tmp_path / 'plain', [f'{j}.pos' for j in JOINTS])
    assert PLANNER_CLI.main([str(no_language), str(tmp_path / 'out')]) == 2
    err = capsys.readouterr().err
    assert str(no_language) in err and 'language_persistent' in err
    out = tmp_path / 'taken'
    out.mkdir()
    (out / 'x').write_text('')
    assert POLICY_CLI.main([str(no_language), str(out)]) == 2
    assert 'not empty' in capsys.readouterr().err


# --- the slow part: a real export, real training, the real backends -------------------------
@pytest.fixture(scope='module')
def offline():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv('HF_HUB_OFFLINE', '1')  # before huggingface_hub is imported, if it is not yet
        require_ml('torch', 'lerobot', 'transformers')
        yield


@pytest.fixture(scope='module')
def dataset(offline, tmp_path_factory) -> Path:
    from lerobot_lang_nodes.recording.dataset import ExportOptions, export
    tmp = tmp_path_factory.mktemp('training')
    bag = two_task_session().write(tmp / 'bags')
    result = export([bag], tmp / 'dataset', ExportOptions(
        fps=FPS, repo_id='test/two_tasks', units='lerobot', episodes_by='task'))
    assert result.episodes == 2
    return result.root


@pytest.fixture(scope='module')
def lerobot_dataset(dataset):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset
    return LeRobotDataset('test/two_tasks', root=dataset, video_backend='pyav')


@pytest.fixture(scope='module')
def trained_policy(dataset, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp('policy') / 'checkpoint'
    return policy_training.train_policy(dataset, out, steps=POLICY_STEPS, batch_size=16,
                                        seed=0, chunk_size=10, num_threads=1, log_every=0)


@pytest.fixture(scope='module')
def trained_planner(dataset, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp('planner') / 'model'
    return planner_training.train_planner(dataset, out, steps=PLANNER_STEPS, seed=0)


def _frame_at(ds, colour: str, phase: int) -> dict:
    """A dataset frame of the colour's episode in the middle of a phase."""
    episode = 0 if colour == 'red' else 1
    start = int(ds.meta.episodes['dataset_from_index'][episode])
    offset = int((SWITCH_S * (0.5 + phase)) * FPS)
    item = ds[start + offset]
    assert item['task'] == task_of(colour)
    return item


def _rgb(item: dict, key: str) -> np.ndarray:
    return (item[key].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)


@pytest.mark.slow
def test_policy_training_reduces_the_loss_and_reports_what_it_used(trained_policy, dataset):
    info = json.loads((dataset / 'meta/info.json').read_text())
    s = trained_policy
    assert s['frames'] == info['total_frames'] and s['episodes'] == 2
    assert s['steps'] == POLICY_STEPS and s['wall_s'] > 0
    assert s['loss_end'] < 0.3 * s['loss_start'], s
    assert s['instructions'] == sorted(f'{verb} the {c} cube' for verb in ('reach', 'grasp')
                                       for c in ('red', 'blue'))
    out = Path(s['output_dir'])
    for name in ('config.json', 'model.safetensors', 'policy_preprocessor.json',
                 'policy_postprocessor.json', 'training_summary.json'):
        assert (out / name).is_file(), name
    assert list(out.glob('policy_preprocessor_step_*normalizer_processor.safetensors'))
    assert json.loads((out / 'config.json').read_text())['type'] == 'lang_chunk'


def _lerobot_backend(path: str):
    from lerobot_lang_nodes.backends.policies.lerobot_policy import LeRobotPolicy
    return LeRobotPolicy(policy_config(model_path=path, cameras=('front', 'wrist'),
                                       device='cpu', dtype='auto'))


def _observation(phase: int, instruction: str) -> dict:
    # What the policy node hands its backend: radians by joint name, camera frames as the
    # simulator sends them (320x240; the backend resizes them to the checkpoint's 64x48).
    return {'instruction': instruction, 'joint_names': list(reversed(JOINTS)),
            'joint_positions': np.zeros(len(JOINTS)),
            'images': {'front': scene(phase, 5), 'wrist': wrist(phase, 5)}}


@pytest.mark.slow
def test_the_lerobot_backend_loads_the_policy_and_the_subtask_text_picks_the_cube(
        trained_policy):
    backend = _lerobot_backend(trained_policy['output_dir'])
    assert backend.policy_type == 'lang_chunk' and backend.chunk_length == 10
    assert backend.action_names == tuple(JOINTS)
    chunks = {c: backend.infer(_observation(0, f'reach the {c} cube')) for c in PAN}
    for colour, chunk in chunks.items():
        assert chunk.shape == (10, len(JOINTS)) and np.all(np.isfinite(chunk))
        # Radians again, joints in the checkpoint's order: the pan joint goes to the cube.
        assert abs(chunk[:, 0].mean() - PAN[colour]) < 0.12, (colour, chunk[:, 0])
    assert chunks['red'][:, 0].mean() - chunks['blue'][:, 0].mean() > 0.5
    grasp = backend.infer(_observation(1, 'grasp the blue cube'))
    assert abs(grasp[:, 5].mean() - GRIPPER_CLOSED) < 0.08, grasp[:, 5]
    assert abs(chunks['blue'][:, 5].mean()) < 0.08, chunks['blue'][:, 5]


@pytest.mark.slow
def test_planner_training_reduces_the_loss_and_uses_every_kind_of_turn(trained_planner):
    s = trained_planner
    assert s['loss_end'] < 0.05 * s['loss_start'], s
    assert s['examples']['subtask'] >= 8 and s['examples']['memory'] == 4
    assert s['examples']['interjection'] == 1
    assert s['subtasks'] == sorted(f'{verb} the {c} cube' for verb in ('reach', 'grasp')
                                   for c in ('red', 'blue'))
    assert s['exact_matches'] == s['checked'] > 0
    params = s['planner_parameters']
    assert params['transformers.image_cameras'] == ['front']
    assert params['transformers.image_size'] == 0
    assert Path(params['prompts_file']).is_file()


def _planner_backend(summary: dict):
    from lerobot_lang_nodes.backends.planners.transformers_planner import TransformersPlanner
    params = summary['planner_parameters']
    given = {k: v for k, v in params.items() if k != 'templates_from'}
    return TransformersPlanner(planner_config(**given, device='cpu', generation_timeout_s=20.0))


@pytest.mark.slow
def test_the_transformers_backend_answers_the_subtask_active_at_a_training_frame(
        trained_planner, lerobot_dataset):
    from lerobot_lang_nodes.core import prompts
    from lerobot_lang_nodes.training.data import language_at
    backend = _planner_backend(trained_planner)
    templates = prompts.load_templates(trained_planner['planner_parameters']['prompts_file'])
    for colour in PAN:
        for phase in (0, 1):
            item = _frame_at(lerobot_dataset, colour, phase)
            now = language_at(item['language_persistent'], float(item['timestamp']))
            assert now.subtask == f"{('reach', 'grasp')[phase]} the {colour} cube"
            messages = prompts.subtask_messages(item['task'], now.plan, templates=templates)
            frame = _rgb(item, 'observation.images.front')
            answer = backend.generate('subtask', messages, {'images': {'front': frame}})
            assert answer == now.subtask, (colour, phase)


@pytest.mark.slow
def test_the_planner_loop_runs_the_recorded_episode_on_camera_frames(trained_planner):
    from lerobot_lang_nodes.core import prompts
    from lerobot_lang_nodes.core.high_level import HighLevelPlanner
    from lerobot_lang_nodes.core.language import LanguageState
    backend = _planner_backend(trained_planner)
    templates = prompts.load_templates(trained_planner['planner_parameters']['prompts_file'])
    state = LanguageState()
    loop = HighLevelPlanner(backend, state, templates=templates)
    loop.set_task(task_of('red'))
    loop.regenerate(0.0, {'images': {'front': scene(0, 5)}})
    assert (state.subtask, state.memory) == ('reach the red cube', 'nothing done yet')
    loop.regenerate(1.0, {'images': {'front': scene(0, 5)}})
    assert state.subtask == 'reach the red cube'
    loop.regenerate(2.0, {'images': {'front': scene(1, 5)}})
    assert (state.subtask, state.memory) == ('grasp the red cube', 'reached the red cube')
    text, speech, plan = INTERJECTION
    assert loop.interject(text, {'images': {'front': scene(1, 5)}}) == (plan, speech)
    assert state.plan == plan


FRESH_PROCESS = '''
import sys
from types import SimpleNamespace
import numpy as np
if sys.argv[2] == 'register':
    import lerobot_lang_nodes.training.configuration_lang_chunk  # noqa: F401
from lerobot_lang_nodes.backends.policies.lerobot_policy import LeRobotPolicy
from lerobot_lang_nodes.testing import policy_config
backend = LeRobotPolicy(policy_config(model_path=sys.argv[1], cameras=('front', 'wrist'),
                                      device='cpu', dtype='auto'))
frames = {c: np.zeros((240, 320, 3), np.uint8) for c in ('front', 'wrist')}
chunk = backend.infer({'instruction': 'reach the red cube', 'joint_names': sys.argv[3:],
                       'joint_positions': np.zeros(6), 'images': frames})
print(chunk.shape)
'''


@pytest.mark.slow
@pytest.mark.parametrize('register', ['register', 'as-is'])
def test_a_fresh_policy_process_loads_the_checkpoint(trained_policy, register):
    """A policy node's process imports only the backend: it must register the type itself."""
    out = subprocess.run([sys.executable, '-c', FRESH_PROCESS, trained_policy['output_dir'],
                          register, *JOINTS], capture_output=True, text=True, timeout=180,
                         env={**os.environ, 'HF_HUB_OFFLINE': '1'})
    assert out.returncode == 0 and '(10, 6)' in out.stdout, out.stderr[-3000:]
