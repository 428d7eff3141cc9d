"""Runtime adapter of `two_head`: its own prompts for text, the instruction for actions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .adapter import AdapterState, BaseLanguageAdapter, NoTextHead
from .modeling_two_head import TEXT_KINDS, render_prompt


class TwoHeadAdapter(BaseLanguageAdapter):
    """Subtask / memory / interjection from the text head; chunks from the action head."""

    joint_units = 'radians'  # trained on the simulator's radians (configuration_two_head)

    def select_action(self, observation: Mapping[str, Any], state: AdapterState) -> np.ndarray:
        return self.predict_chunk(self.frame(observation, state.instruction))

    def generate_text(self, kind: str, observation: Mapping[str, Any] | None,
                      state: AdapterState, user_text: str | None = None) -> str:
        if kind not in TEXT_KINDS:
            raise NoTextHead(f'the two_head text head was not trained for {kind!r}; it '
                             f'generates {list(TEXT_KINDS)}')
        prompt = render_prompt(kind, state.task, plan=state.plan, memory=state.memory,
                               completed=state.prior_subtask, user_text=user_text or '')
        gen = self.gen
        return self.policy.select_message(prompt, max_new_tokens=gen.max_new_tokens or None,
                                          min_new_tokens=gen.min_new_tokens,
                                          temperature=gen.temperature, top_p=gen.top_p)
