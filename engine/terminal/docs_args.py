"""`wren ask`'s document library options (no imports beyond argparse: `wren ask` parses them
before anything else loads)."""

from __future__ import annotations

import argparse


def add_arguments(ask: argparse.ArgumentParser) -> None:
    docs = ask.add_mutually_exclusive_group()
    docs.add_argument("--docs", dest="docs", action="store_const", const=True, default=None,
                      help="search the document library for this question (default: the library.scope setting, "
                           "or the project's documents in a project's chat); the sources follow the answer")
    docs.add_argument("--no-docs", dest="docs", action="store_const", const=False,
                      help="leave the document library out of this question")
    ask.add_argument("--expand-query", dest="expand_query", action="store_const", const=True, default=None,
                     help="the loaded model writes a few other phrasings of the question and the library search "
                          "uses them too (default: the library.expand_query setting, off)")
    ask.add_argument("--project", metavar="NAME",
                     help="ask in a project: its documents and instructions (see `wren projects`)")
