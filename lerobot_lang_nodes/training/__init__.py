"""Training from exported datasets: the closed data loop's last step, on a CPU.

A session recorded as bags and exported with `lerobot-lang export ... --units lerobot` is a
LeRobot v3.0 dataset with camera videos, joint state, actions, the task and LeRobot's language
columns. From such a dataset only (never simulator ground truth):

* ``policy``: `lang_chunk` (configuration_ / modeling_ / processor_lang_chunk), a small
  LeRobot policy type of the project's own conditioned on images, joint state and the active
  subtask text, saved as a LeRobot checkpoint for the `lerobot` policy backend;
* ``planner``: a tiny Idefics3 vision-language model (tiny_models/vlm.py) that answers the
  planner's subtask prompt (and memory / interjection turns when the dataset has them) with
  the subtask active at each frame, saved with ``save_pretrained`` for the `transformers`
  planner backend.

``data`` holds the dataset checks shared by both. Importing this package, ``data``, ``policy``
or ``planner`` does not import torch, LeRobot or transformers; the training functions do.
"""
