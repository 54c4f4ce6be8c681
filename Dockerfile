# The image both Fly process groups run (see fly.toml). Handler modules come
# from the Motir app: install its package here too, or build this image FROM
# the app's, and point MOTIR_APP at the module that registers the handlers.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /srv/motir-supervisor
COPY pyproject.toml README.md ./
COPY motir_supervisor ./motir_supervisor
RUN pip install . && useradd --system --no-create-home motir
USER motir

# Exec form: the supervisor is PID 1's direct child of Fly's init and gets
# SIGTERM itself, not through a shell that would swallow it.
CMD ["motir-supervisor", "--workers", "4"]
