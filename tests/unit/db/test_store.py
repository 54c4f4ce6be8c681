"""What a worker hands back to the hand-on of the claims of its runs."""

from motir_supervisor import db


def _job(job_id, kind, generation):
    return db.ClaimedJob(job_id, "default", kind, "null", 1, 5, None, generation=generation)


def test_a_kinds_generation_is_the_one_its_jobs_share_and_none_where_they_differ():
    jobs = [_job(1, "a", 7), _job(2, "a", 7), _job(3, "b", 7), _job(4, "b", 8), _job(5, "b", 7),
            _job(6, "c", None), _job(7, "d", None), _job(8, "d", 9)]
    assert db.generations_of(jobs) == {"a": 7, "b": None, "c": None, "d": None}
    assert db.generations_of([]) == {}
