"""The test bed the tests, the benchmarks and the demo share: a throwaway
PostgreSQL server (pgserver), a small autocommit connection for their own
reads and writes (sql), waiting for a condition (polling), and real
``motir-supervisor run`` processes started as an operator starts them
(supervisors).

It lives beside the package and is never installed with it: nothing in
motir_supervisor imports it, and it imports nothing from tests/, benchmarks/
or examples/ (the test suite's sample app is only named, as the module a
supervisor it starts runs).
"""
