"""supervisor.forking: a forked child holds the objects it inherited frozen,
and its parent keeps what it had frozen itself."""

import os


def test_a_forked_child_inherits_the_parent_s_objects_frozen_and_the_parent_thaws():
    import gc
    import signal
    from motir_supervisor.supervisor.forking import fork_child

    read, write = os.pipe()

    def body():
        os.write(write, str(gc.get_freeze_count()).encode())
        return 0

    pid = fork_child(body, (signal.SIGTERM,), [read])
    os.close(write)
    try:
        assert gc.get_freeze_count() == 0
        frozen_in_child = int(os.read(read, 64))
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    # Every object the child had at the fork: its collections never walk them.
    assert frozen_in_child > 1000


def test_a_fork_keeps_frozen_what_its_parent_had_frozen_itself():
    import gc
    import signal
    from motir_supervisor.supervisor.forking import fork_child

    gc.freeze()
    try:
        pid = fork_child(lambda: 0, (signal.SIGTERM,), [])
        os.waitpid(pid, 0)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
