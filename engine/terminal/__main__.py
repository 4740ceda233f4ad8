"""`python -m wren.engine.terminal`: the `wren` command."""

import sys

from .launch import main

sys.exit(main())
