"""Chat ▸ Show token probabilities: new answers keep each token's probability and its 5
likeliest alternatives (logprobs=5); answers that kept them show it on hover. The choice is
saved, marks unsure words in the chat view, and asks the engine for logprobs per answer."""

from __future__ import annotations

from dataclasses import fields, replace

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction

from wren.engine.api import Engine
from wren.engine.inference.sampling import SamplingParams
from wren.engine.records import SendOptions

from ..chat.probabilities import SETTING_KEY as PROBABILITIES_KEY
from ..chat.probabilities import TOP_COUNT
from .seams import AnswerView, StatusLine, TaskRunner

# The engine's sampling can ask for token logprobs (SamplingParams.logprobs: the top-k count).
_ENGINE_LOGPROBS = "logprobs" in {f.name for f in fields(SamplingParams)}


class TokenProbabilities(QObject):
    def __init__(self, engine: Engine, *, chat: AnswerView, status: StatusLine, tasks: TaskRunner,
                 action_parent: QObject | None = None, parent: QObject | None = None):
        """Given the chat view, the status bar and the task runner by their seams (seams.py);
        `action` (a checkable menu action) belongs to `action_parent`, the window."""
        super().__init__(parent)
        self.engine = engine
        self.chat = chat
        self.status = status
        self.tasks = tasks
        self.action = QAction("Show token &probabilities", action_parent)
        self.action.setObjectName("tokenProbabilitiesAction")
        self.action.setCheckable(True)
        self.action.setToolTip(
            "New answers keep how likely each token was; hover a word of one to see it and the "
            "5 likeliest tokens, and unsure ones are underlined")
        self.action.toggled.connect(self._toggled)

    async def load(self) -> None:
        """The saved choice, shown without saving it again."""
        on = await self.engine.settings.get(PROBABILITIES_KEY) is True
        self.action.blockSignals(True)
        self.action.setChecked(on)
        self.action.blockSignals(False)
        self.chat.set_probability_marks(on)

    def _toggled(self, on: bool) -> None:
        self.chat.set_probability_marks(on)
        self.tasks.run(self.engine.settings.set(PROBABILITIES_KEY, on), what="saving the token probabilities choice")
        if on and not _ENGINE_LOGPROBS:
            self.status.showMessage("This Wren's engine cannot report token probabilities yet: "
                                    "answers that kept them still show them on hover", 10000)

    async def answer_options(self, conversation_id: int, options: SendOptions | None) -> SendOptions | None:
        """`options` for an answer, asking for logprobs when Show token probabilities is on: the
        sampling the answer would get anyway (the chat's settings over the defaults), plus them."""
        if not self.action.isChecked() or not _ENGINE_LOGPROBS:
            return options
        params = options.sampling if options is not None else None
        if params is None:
            conv = await self.engine.conversations.get(conversation_id)
            params = await self.engine.settings.default_sampling(overrides=conv.settings.get("sampling"))
        params = params.with_(logprobs=TOP_COUNT)
        return replace(options, sampling=params) if options is not None else SendOptions(sampling=params)
