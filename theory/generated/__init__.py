"""Numeric modules generated from the sympy derivation, one per parameterisation (``CACO.py`` ...).

Written by ``python -m qkdyn.theory.generate`` and committed: the package carries them, nothing is
generated or executed from a cache at run time (tests/theory/test_generated.py checks that they equal what
the derivation generates now).
"""
