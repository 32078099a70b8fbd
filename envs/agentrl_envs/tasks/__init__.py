"""Task sources shared by envs: problems, gold answers and verifiers, with no model or env in them.

- ``math``: offline math problems from reasoning-gym, the ``\\boxed{}`` extractor and the
  math-verify verifier.
- ``benchmarks``: loaders for the math benchmarks the papers report (hub or local files).
"""
