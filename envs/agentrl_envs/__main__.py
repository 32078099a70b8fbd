"""``python -m agentrl_envs``: the ``agentrl-envs`` command."""

import sys

from agentrl_envs.cli import main

sys.exit(main())
