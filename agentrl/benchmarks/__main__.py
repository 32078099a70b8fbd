"""``python -m agentrl.benchmarks NAME [ARGS]``: the same as ``agentrl bench NAME [ARGS]``."""

import sys

from agentrl.benchmarks import main

sys.exit(main())
