"""``python -m agentrl.evaluation [ARGS]``: the same as ``agentrl eval [ARGS]``."""

import sys

from agentrl.evaluation.cli import main

sys.exit(main())
