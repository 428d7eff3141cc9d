"""`lerobot-lang`: start the node graph (sim / real) and talk to it without ros2cli."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

# subcommand -> module with add_arguments(parser) and run(args) -> int; imported only when used
# so `lerobot-lang say` never loads MuJoCo or torch.
SUBCOMMANDS = {
    'sim': ('lerobot_lang_nodes.cli.bringup', 'start the simulated system (MuJoCo SO-101)'),
    'real': ('lerobot_lang_nodes.cli.bringup', 'start the real SO-101 system from a robot YAML'),
    'policy': ('lerobot_lang_nodes.cli.bringup',
               'start the policy (and --planner) of a sim/real graph whose robot side runs on '
               'another computer (--without policy there)'),
    'calibrate': ('lerobot_lang_nodes.cli.calibrate',
                  'calibrate an SO-101 follower and write LeRobot calibration JSON'),
    'task': ('lerobot_lang_nodes.cli.operator', 'set the task (std_msgs/String on /task)'),
    'run': ('lerobot_lang_nodes.cli.operator',
            'run a task to its end (/run_task action): prints subtasks, exit 0 on success'),
    'interject': ('lerobot_lang_nodes.cli.operator',
                  'interject: the operator speaks to the robot mid-task (std_msgs/String on '
                  '/interjection; the planner re-plans and may answer on /speech)'),
    # The first name of `interject`, kept for scripts that use it; `<say>` is the robot's reply.
    'say': ('lerobot_lang_nodes.cli.operator', 'the same as interject (its first name)'),
    'ask': ('lerobot_lang_nodes.cli.operator', 'ask a question about the scene (/vqa)'),
    'pause': ('lerobot_lang_nodes.cli.operator', 'pause the robot (/pause)'),
    'resume': ('lerobot_lang_nodes.cli.operator', 'resume the robot (/resume)'),
    'status': ('lerobot_lang_nodes.cli.operator', 'print runtime status and language context'),
    'reset': ('lerobot_lang_nodes.cli.operator', 'reset the simulated scene (/sim/reset)'),
    'takeover': ('lerobot_lang_nodes.cli.operator',
                 'a human takes the arm with the leader (/takeover: the policy\'s queue is '
                 'dropped, the leader driven to the arm\'s pose, then released)'),
    'handback': ('lerobot_lang_nodes.cli.operator',
                 'hand the arm back to the policy (/handback: nothing computed before plays)'),
    'burst': ('lerobot_lang_nodes.cli.operator',
              'act for SECONDS, then pause (the executor\'s timed burst, /burst)'),
    'pedal': ('lerobot_lang_nodes.cli.pedal',
              'a USB foot switch (or any key of an input device) takes over and hands back '
              '(/takeover, /handback)'),
    'console': ('lerobot_lang_nodes.cli.console',
                'interactive console: interjections, /task, /ask, /pause, ... in one terminal'),
    'record': ('lerobot_lang_nodes.cli.record', 'record the running graph (rosbag2 MCAP)'),
    'record-episodes': ('lerobot_lang_nodes.cli.record',
                        'episodic recording beside a recorder, as lerobot-record: a task per '
                        'episode, episode and reset times, end early, re-record, labels'),
    'export': ('lerobot_lang_nodes.cli.export', 'export bags to a LeRobot v3.0 dataset'),
    'annotate': ('lerobot_lang_nodes.cli.export',
                 'export bags to a LeRobot v3.0 dataset whose subtasks and memory come from a '
                 'planner backend run offline over the recording (post-hoc language for '
                 'demonstrations)'),
    'train-policy': ('lerobot_lang_nodes.cli.train',
                     'train a language-conditioned action policy (LeRobot checkpoint) from an '
                     'exported dataset'),
    'train-planner': ('lerobot_lang_nodes.cli.train',
                      'train a small vision-language planner (transformers) on a dataset\'s '
                      'language columns'),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='lerobot-lang', description=__doc__)
    sub = parser.add_subparsers(dest='command', required=True, metavar='COMMAND')
    for name, (module_path, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        try:
            module = importlib.import_module(module_path)
        except ModuleNotFoundError as exc:
            if exc.name and (module_path + '.').startswith(exc.name + '.'):
                continue  # not shipped in this build
            raise
        module.add_arguments(name, p)
        p.set_defaults(_module=module)
    return parser


def _run(name: str, module: Any, args: argparse.Namespace) -> int:
    """``module.run``; a missing model-stack package (export, training without LeRobot or
    torch) ends it with one line naming the requirement file and the command, exit 2."""
    from lerobot_lang_nodes import dependencies
    try:
        return int(module.run(name, args) or 0)
    except ImportError as exc:
        message = dependencies.model_stack_message(f'lerobot-lang {name}', exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return 2


def run_one(name: str, module: Any, argv: list[str] | None = None) -> int:
    """One subcommand as its own program (``python -m <module>``): same arguments, same run."""
    parser = argparse.ArgumentParser(prog=f'lerobot-lang {name}', description=module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_arguments(name, parser)
    return _run(name, module, parser.parse_args(argv))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return _run(args.command, args._module, args)


if __name__ == '__main__':
    sys.exit(main())
