"""Enqueued, the id enqueue returns: a plain int wherever an int goes, with
the duplicate flag kept where the value is kept."""

import copy
import json
import pickle

import psycopg2.extensions

from motir_supervisor import Enqueued


def test_an_enqueued_id_reads_as_the_plain_id():
    job_id = Enqueued(42, duplicate=True)
    assert job_id == 42 and hash(job_id) == hash(42) and isinstance(job_id, int)
    assert (str(job_id), repr(job_id), f"{job_id}", "%s" % job_id) == ("42",) * 4
    assert json.dumps({"id": job_id}) == '{"id": 42}'
    assert psycopg2.extensions.adapt(job_id).getquoted() == b"42"
    assert type(job_id + 1) is int


def test_the_duplicate_flag_survives_a_copy_and_a_pickle():
    for duplicate in (True, False):
        job_id = Enqueued(7, duplicate=duplicate)
        for kept in (copy.copy(job_id), pickle.loads(pickle.dumps(job_id))):
            assert (kept, kept.duplicate, type(kept)) == (7, duplicate, Enqueued)
    assert Enqueued(7).duplicate is False
