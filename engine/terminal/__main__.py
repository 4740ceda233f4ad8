"""`python -m wren.engine.terminal`: the `wren` command."""

import sys

from .main import main

sys.exit(main())
