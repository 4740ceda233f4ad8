"""The safety service (`engine.safety`): what the policy says about a text, the user's
rules and blocklist, and the care message. The policy itself is the engine core's
(`engine.policy`): every answer and tool result is checked against the one in force."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from .. import paths
from ..events import SafetyAction
from . import user_policy
from .care import CareMessage, load_care
from .policy import Policy
from .scanner import ScanResult, scan

if TYPE_CHECKING:
    from ..core import Core

# A question this short is scanned on the loop: ~0.1 ms, less than the trip to an executor
# thread and back (a Send's scan was waiting ~1 ms in the executor's queue).
INLINE_SCAN_CHARS = 1_000


class Safety:
    """`engine.safety`."""

    def __init__(self, core: Core):
        self.e = core
        self._care_messages: dict[str | None, CareMessage] = {}

    async def scan(self, text: str) -> ScanResult:
        """What the safety policy says about `text` before it is sent: off the loop thread,
        but for a short text (INLINE_SCAN_CHARS), whose scan costs less than the hop."""
        if self.scans_inline(text):
            return scan(text, self.e.policy, self.e.destination())
        return await asyncio.get_running_loop().run_in_executor(None, scan, text, self.e.policy, self.e.destination())

    @staticmethod
    def scans_inline(text: str) -> bool:
        """Whether `scan(text)` runs on the loop (a short text) rather than an executor thread."""
        return isinstance(text, str) and len(text) <= INLINE_SCAN_CHARS

    def care_message(self, language: str | None = None) -> CareMessage:
        """The message a window shows for care, in the user's language."""
        if language not in self._care_messages:
            self._care_messages[language] = load_care(language, paths.data_dir())
        return self._care_messages[language]

    # -- safety --------------------------------------------------------------------------

    def rules(self) -> list[user_policy.RuleRow]:
        """Every category with its action for the local model and for remote servers."""
        return user_policy.rule_rows(self.e.policy)

    async def set_action(self, category: str, destination: str, action: SafetyAction) -> None:
        await self._change_policy(user_policy.set_action, category, destination, SafetyAction(action))

    async def blocklist(self) -> tuple[list[str], list[str]]:
        """The user's own blocked (words, patterns)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.blocklist_now)

    def blocklist_now(self) -> tuple[list[str], list[str]]:
        """`blocklist()` read on the caller's thread (a small file): for a page filling itself."""
        return user_policy.blocklist(paths.data_dir())

    async def set_blocklist(self, words: list[str], patterns: list[str]) -> None:
        """Replace the user's own blocked words and patterns; a bad pattern is refused."""
        await self._change_policy(user_policy.set_blocklist, words, patterns)

    async def _change_policy(self, change, *args: Any) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, change, paths.data_dir(), *args)
        self.e.set_policy(*await loop.run_in_executor(None, Policy.load))

