"""bin/bench: measuring motir-supervisor against PostgreSQL's own limit.

Not part of the package: nothing here is installed, and the package never
imports it.
"""
