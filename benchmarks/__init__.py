"""bin/bench: measuring motir-supervisor against PostgreSQL's own limit (issue 5).

Not part of the package: nothing here is installed, and the package never
imports it.
"""
