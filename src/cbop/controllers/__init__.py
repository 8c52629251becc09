"""cbop's controllers, each assembled on :mod:`cbop.runtime` with its builder.

- :mod:`cbop.controllers.configbundle`: keeps each ConfigBundle's ConfigMap equal to it.
"""
