"""bench/closed_loop.py end to end at the reduced `ci` setting: the stages connect.

One scene is collected by the scripted graph with the recorder (an interjection and a VQA
question included), exported, a policy and a planner are trained for a few steps, and both are
deployed through the real backends (`lerobot`, `transformers`) on a held-out scene; then one
DAgger round: the learned policy on a training layout with the virtual operator correcting it,
recorded, exported, aggregated with the demonstrations and trained again, the new checkpoint
evaluated on the held-out scene. The numbers of such a short run mean nothing; what is checked
is that each stage's output is what the next one (and LeRobot) can use. The benchmark runs as a
user runs it (a subprocess with this interpreter) and reserves its own ROS domain.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lerobot_lang_nodes.testing import require_ml

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[2] / 'bench' / 'closed_loop.py'
LEARNED = 'learned_planner+learned_policy'


@pytest.fixture(scope='module')
def loop(tmp_path_factory):
    require_ml('torch', 'lerobot', 'transformers')
    tmp = tmp_path_factory.mktemp('closed_loop')
    work, reports = tmp / 'work', tmp / 'reports'
    proc = subprocess.Popen([sys.executable, str(BENCH), 'all', '--preset', 'ci', '--work',
                             str(work), '--report-dir', str(reports)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # The stages before DAgger take 5 to 6 minutes on 2 shared cores, its round 2 to 3.
        out, _ = proc.communicate(timeout=480)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # its clean path: stops every node by PID
        out, _ = proc.communicate(timeout=60)
        pytest.fail(f'closed loop did not finish:\n{out[-4000:]}')
    assert proc.returncode == 0, out[-4000:]
    return work, reports, out


@pytest.mark.timeout(570)
def test_collected_bags_export_to_a_dataset_lerobot_loads(loop):
    import pyarrow.parquet as pq
    work, _, _ = loop
    collected = json.loads((work / 'collect.json').read_text())
    assert collected['tasks_succeeded'] >= 1 and collected['bags']
    assert collected['interjections'] == 1 and collected['vqa_questions'] == 1
    exported = json.loads((work / 'export.json').read_text())
    loaded = exported['lerobot_load']  # LeRobotDataset(...) and one frame read back
    assert loaded['frames'] == exported['frames'] > 0
    assert loaded['episodes'] == exported['episodes'] >= 1
    assert {'observation.state', 'action', 'observation.images.front',
            'observation.images.wrist'} <= set(loaded['keys'])
    info = json.loads((work / 'dataset/meta/info.json').read_text())
    assert info['fps'] == 30 and info['features']['action']['names'][0] == 'shoulder_pan.pos'
    styles = set()
    for path in sorted((work / 'dataset/data').rglob('*.parquet')):
        for row in pq.read_table(path, columns=['language_persistent',
                                                'language_events']).to_pylist():
            styles |= {r['style'] for r in row['language_persistent']}
            styles |= {e['style'] for e in row['language_events']}
    # Every language style the planner produces reached the dataset.
    assert {'subtask', 'plan', 'memory', 'interjection', 'vqa'} <= styles, styles


@pytest.mark.timeout(570)
def test_trained_checkpoints_load_through_the_backends_and_drive_the_graph(loop):
    work, _, _ = loop
    trained = json.loads((work / 'train.json').read_text())
    for model in ('policy', 'planner'):
        assert (work / trained[model]['path'] / 'model.safetensors').is_file()
        assert trained[model]['loss_end'] < trained[model]['loss_start']
    assert trained['policy']['image_keypoints'] and trained['policy']['shift_pixels'] == 4
    # The planner learned to answer from where the task stands, seeing both cameras, and the
    # deployed planner is pointed at exactly that wording.
    params = trained['planner']['planner_parameters']
    assert params['transformers.image_cameras'] == ['front', 'wrist']
    assert trained['planner']['vision_size'] == 64
    wording = (work / trained['planner']['path'] / 'prompts.yaml').read_text()
    assert 'Current subtask: {subtask}' in wording and 'Joints: {joints}' in wording
    deployed = json.loads((work / 'deploy.json').read_text())
    collected = json.loads((work / 'collect.json').read_text())
    assert not ({s['seed'] for s in collected['scenes']}
                & {p['seed'] for p in deployed['plan']})  # held-out layouts only
    run = deployed['configs'][LEARNED]
    policy = run['diagnostics']['policy: policy']
    planner = run['diagnostics']['planner: text generation']
    assert policy['backend'] == 'lerobot' and policy['load_state'] == 'loaded'
    assert policy['policy_type'] == 'lang_chunk' and int(policy['chunks_published']) > 0
    assert planner['backend'] == 'transformers' and planner['load_state'] == 'ready'
    assert run['chunks'] > 0
    # The learned planner generated through the backend, and every answer went somewhere: a
    # subtask on /language_context or, from a model trained 20 steps, a counted empty answer
    # (which leaves the subtask empty); never a failure or a timeout.
    assert float(planner['latency_p50_s.subtask']) > 0.0
    assert planner['failures.subtask'] == '0' and planner['timeouts.subtask'] == '0'
    assert run['distinct_subtasks'] or int(planner['empty.subtask']) > 0, planner
    # It quoted the arm's joint_states in its subtask prompt: six joints, radians, rendered as
    # the trainer rendered the dataset's state.
    joints = planner['last_prompt.subtask'].splitlines()[-1]
    assert re.fullmatch(r'Joints:( -?\d+\.\d\d){6}', joints), planner['last_prompt.subtask']
    assert all(code == 0 for code in run['exit_codes'].values()), run['exit_codes']
    baseline = deployed['configs']['scripted_planner+scripted_policy']
    assert baseline['chunks'] > 0 and baseline['distinct_subtasks']
    # The held-out scripted run was recorded, exported and the planner scored on it.
    assert deployed['heldout_dataset']['frames'] > 0
    accuracy = deployed['planner_accuracy']
    assert accuracy['frames_scored'] > 0 and 0.0 <= accuracy['accuracy'] <= 1.0
    assert deployed['policy_heldout_loss']['policy'] > 0.0


@pytest.mark.timeout(570)
def test_report_holds_every_figure(loop):
    _, reports, out = loop
    text = (reports / 'closed_loop.md').read_text()
    assert text.startswith('# Closed data loop')
    for heading in ('## Data', '## Training', '## Deployed on held-out scenes',
                    '## Learned planner', '## Targets', '## DAgger rounds',
                    '### DAgger targets'):
        assert heading in text, heading
    summary = json.loads((reports / 'closed_loop.json').read_text())['summary']
    assert summary['dataset']['frames'] > 0
    assert summary['training']['policy']['train_s'] > 0
    assert set(summary['deploy']) == {'scripted_planner+scripted_policy', LEARNED}
    assert summary['stage_wall_s']['total'] > 0 and summary['stage_wall_s']['dagger'] > 0
    rounds = summary['dagger']['rounds']
    assert [r['round'] for r in rounds] == [0, 1]
    assert rounds[1]['policy_frames'] > rounds[0]['policy_frames']
    assert (reports / 'closed_loop_dagger.png').stat().st_size > 0
    assert 'done in' in out


@pytest.mark.timeout(570)
def test_a_dagger_round_corrects_the_policy_records_it_and_retrains(loop):
    import pyarrow.parquet as pq
    work, _, _ = loop
    (rnd,) = json.loads((work / 'dagger.json').read_text())['rounds']
    collected = json.loads((work / 'collect.json').read_text())
    deployed = json.loads((work / 'deploy.json').read_text())
    heldout = [p['seed'] for p in deployed['plan']]
    # The learned policy ran on fresh training layouts, and the operator took over from it.
    run = rnd['policy_deploy']
    layouts = {s['seed'] for s in run['scenes']}
    assert layouts and not layouts & ({s['seed'] for s in collected['scenes']} | set(heldout))
    assert run['takeovers'] >= 1 and run['handbacks'] <= run['takeovers']
    assert sum(run['takeovers_by_reason'].values()) == run['takeovers']
    assert run['intervention_s'] > 0 and all(c == 0 for c in run['exit_codes'].values())
    assert 'virtual_operator' in run['exit_codes']  # stopped with the graph, by its PID
    # Its corrections reached the round's dataset: the intervention column, human control.
    flags, sources = [], []
    for path in sorted((work / 'dagger/round_1/policy_dataset/data').rglob('*.parquet')):
        table = pq.read_table(path, columns=['intervention', 'control_source']).to_pydict()
        flags += [bool(f[0] if isinstance(f, list) else f) for f in table['intervention']]
        sources += table['control_source']
    assert any(flags) and not all(flags), 'the round holds no (or only) corrected frames'
    assert all(s == 'human' for f, s in zip(flags, sources) if f)
    assert rnd['policy_dataset']['intervention_frames'] == sum(flags)
    # Aggregated with the demonstrations (LeRobot's aggregate_datasets) and trained again on
    # both, the corrections weighted up.
    exported = json.loads((work / 'export.json').read_text())
    assert rnd['policy_aggregate']['frames'] == exported['frames'] + len(flags)
    training = rnd['policy_training']
    assert training['frames'] == rnd['policy_aggregate']['frames']
    assert training['intervention_frames'] == sum(flags)
    assert training['sampled_share_intervention'] > sum(flags) / training['frames']
    assert (work / training['path'] / 'model.safetensors').is_file()
    # The retrained checkpoint loaded and acted on the held-out episodes, without the operator.
    ev = rnd['eval']['scripted_planner+learned_policy']
    assert ev['seeds'] == heldout
    assert f"policy.model_path={(work / training['path']).resolve()}" in ev['overrides']
    policy = ev['diagnostics']['policy: policy']
    assert policy['backend'] == 'lerobot' and policy['load_state'] == 'loaded'
    assert int(policy['chunks_published']) > 0 and ev['chunks'] > 0
    assert 'virtual_operator' not in ev['exit_codes']
    assert all(code == 0 for code in ev['exit_codes'].values()), ev['exit_codes']
