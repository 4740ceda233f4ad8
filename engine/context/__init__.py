"""Context assembly: what the model sees each turn, fitted to its window, with a report."""

from .assemble import (
    AssembledContext,
    ContextAssembler,
    ContextOverflow,
    ContextRequest,
    Summarize,
)
from .history import lineage
from .report import (
    REPORT_META_KEY,
    ContextPart,
    ContextReport,
    PartKind,
    PartState,
    report_from_meta,
)
from .settings import (
    INSTRUCTIONS_KEY,
    ContextSettings,
    Instructions,
    load_instructions,
    load_settings,
    save_instructions,
)
from .summary import MemorySummaries, SavedSummary, SummaryStore, summary_prompt

__all__ = [
    "INSTRUCTIONS_KEY", "REPORT_META_KEY", "AssembledContext", "ContextAssembler", "ContextOverflow",
    "ContextPart", "ContextReport", "ContextRequest", "ContextSettings", "Instructions",
    "MemorySummaries", "PartKind", "PartState", "SavedSummary", "Summarize", "SummaryStore",
    "lineage", "load_instructions", "load_settings", "report_from_meta", "save_instructions", "summary_prompt",
]
