"""The contract between the supervisor and its workers.

A worker is a forked child, so everything the two share is created by the
supervisor before the fork and inherited by the worker; none of it is a
database connection. Each piece has one owner module:

============================  ==========================  =================================
what                          module                      who writes / who reads
============================  ==========================  =================================
the ledger: one entry per     :mod:`.ledger` (shared      the worker writes every job's
claimed job, its state, its   memory)                     state; the supervisor reads it
decided outcome, the                                      once the worker has exited and
retiring flag and the stop                                writes or releases what is left;
flag                                                      the supervisor sets the stop flag
the ready pipe                :mod:`.lifecycle`           the worker writes one byte once
                                                          its apps imported; the supervisor
                                                          reads it when the worker exits
exit codes, handled signals,  :mod:`.lifecycle`           the worker exits with a code the
parent-death signal                                       supervisor reads as a hint only
the listener's and the        :mod:`.tokens`              a worker takes a token; the
scheduler's tokens, and the                               kernel frees it when the holder
kicks pipe                                                dies; the supervisor kicks
============================  ==========================  =================================

The order that makes the contract safe: a worker writes a job's entry
before its handler starts and its outcome before it writes that outcome to
the database, so whatever instant the worker dies at, its supervisor knows
job by job what to write or give back (see :mod:`..supervisor.rescuer`).
"""
