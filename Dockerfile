FROM python:3.11-slim-bookworm
# Debian's Chromium renders artifacts for the verifier (Playwright drives it by path): the
# headless shell when headless, the full browser under Xvfb, which ffmpeg grabs for videos.
# bubblewrap and Debian's python3 make the sandbox Python tasks' hidden tests run in.
RUN apt-get update \
    && apt-get install -y --no-install-recommends chromium chromium-headless-shell xvfb ffmpeg \
       bubblewrap python3 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY worker worker
COPY scheduler scheduler
COPY verifier verifier
COPY ops ops
COPY migrations migrations
RUN pip install --no-cache-dir .
USER nobody
