"""An app that registers a generator function as a handler: refused when it
is imported, so the supervisor stops with one line naming the kind."""

from motir_supervisor import job


@job("yields_by_mistake")
def yields_by_mistake(j):
    yield j.payload
