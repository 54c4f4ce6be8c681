"""ipc.ledger: what a forked worker writes in its shared ledger, read whole
by its supervisor, and an error cut to its page."""

import os

from motir_supervisor.ipc import ledger


def test_the_ledger_hands_the_supervisor_every_field_a_forked_worker_wrote():
    book = ledger.Ledger(4)
    pid = os.fork()
    if pid == 0:  # the worker's side, in a real child process
        done, failed, running = book.claim(11), book.claim(12), book.claim(13)
        book.decide(done, ledger.SUCCEEDED, 0.25)
        book.decide(failed, ledger.FAILED, 1.5, "ValueError: boom \u00e9", 60.0, True)
        book.mark(running, ledger.RUNNING)
        book.release(book.claim(14))
        book.set_retiring("at 612 MB \u00e9" + "x" * 100)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    entries = {entry.job_id: entry for entry in book.entries()}
    assert entries[11] == ledger.Entry(11, ledger.SUCCEEDED, False, 0.0, None, 0.25)
    assert entries[12] == ledger.Entry(12, ledger.FAILED, True, 60.0, "ValueError: boom \u00e9",
                                       1.5)
    assert entries[13].state == ledger.RUNNING and 14 not in entries
    assert book.retiring and not book.stop_asked
    # The reason is cut to what the header holds, never into the entries.
    assert book.retiring_why.startswith("at 612 MB \u00e9x") and len(book.retiring_why) < 64
    book.close()


def test_a_ledger_error_longer_than_its_page_is_cut_not_spilled_into_the_next():
    book = ledger.Ledger(2)
    first, second = book.claim(1), book.claim(2)
    book.decide(first, ledger.FAILED, 0.0, "x" * (ledger.ERROR_BYTES * 2))
    book.decide(second, ledger.FAILED, 0.0, "second")
    by_id = {entry.job_id: entry.error for entry in book.entries()}
    assert by_id == {1: "x" * ledger.ERROR_BYTES, 2: "second"}


def test_a_success_keeps_its_output_when_it_fits_its_page_and_only_then():
    book = ledger.Ledger(4)
    small, large, none, reused = (book.claim(job_id) for job_id in (1, 2, 3, 4))
    book.decide(small, ledger.SUCCEEDED, 0.1, output='{"sent": "\u00e9"}')
    book.decide(large, ledger.SUCCEEDED, 0.1, output='"' + "x" * ledger.ERROR_BYTES + '"')
    book.decide(none, ledger.SUCCEEDED, 0.1)
    # An entry that held a failure's error before holds no text for a success.
    book.decide(reused, ledger.FAILED, 0.1, "ValueError: before")
    book.release(reused)
    book.decide(book.claim(5), ledger.SUCCEEDED, 0.1)
    outputs = {entry.job_id: (entry.output, entry.error) for entry in book.entries()}
    assert outputs == {1: ('{"sent": "\u00e9"}', None), 2: (None, None), 3: (None, None),
                       5: (None, None)}
