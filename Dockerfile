# FATHOM environment server, as an OpenEnv / Hugging Face Space runs it: `fathom serve` on port 8000.
# The image does what CI does on a fresh Debian machine: `make setup` (the target `make test` depends
# on), then the `fathom serve` command the tests start; tests/test_server_deploy.py checks these lines.
FROM python:3.11-slim-bookworm

# make drives the set-up; `make setup` installs its own Debian packages (bubblewrap, corpora sources).
RUN apt-get update && apt-get install -y --no-install-recommends make && rm -rf /var/lib/apt/lists/*

# One HOME at build and run time, so the corpora built here are found whatever uid runs the Space.
ENV HOME=/opt/fathom
WORKDIR /opt/fathom/app
COPY . .
RUN make setup
RUN chmod -R a+rX /opt/fathom

ENV PATH=/opt/fathom/app/.venv/bin:$PATH
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz')"]
# A public Space should require a token: add `--token-file /run/secrets/fathom_token`.
CMD ["fathom", "serve", "--host", "0.0.0.0", "--port", "8000"]
