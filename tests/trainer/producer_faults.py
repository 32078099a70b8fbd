"""A test plug-in (recipe ``env_modules: [count_env, producer_faults]``, ``algorithm:
producer_faults``): the default algorithm whose producer-side ``roll_out`` misbehaves once at one
iteration, inside an asynchronous producer's process: ``die`` (SIGKILL itself), ``hang`` (sleep
without a sign of progress) or ``raise`` (an exception). ``marker`` is a file that says the fault
has happened (a restarted producer then plays normally); ``always: true`` repeats it every time."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from agentrl.algorithms import Algorithm, register_algorithm
from agentrl.registry import Param


@register_algorithm("producer_faults")
class ProducerFaults(Algorithm):
    params = {"mode": Param("die", "what goes wrong", "choice", ("die", "hang", "raise")),
              "at": Param(2, "the iteration it goes wrong at", "int", lo=0),
              "marker": Param("", "a file written when it has gone wrong", "str"),
              "always": Param(False, "go wrong at every attempt", "bool")}

    def roll_out(self, player, tasks):
        kw = self.kwargs
        marker = Path(kw["marker"])
        if player.step == kw["at"] and (kw["always"] or not marker.exists()):
            marker.write_text(kw["mode"])
            if kw["mode"] == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            if kw["mode"] == "hang":
                time.sleep(3600)
            raise ValueError("injected producer fault")
        return super().roll_out(player, tasks)
