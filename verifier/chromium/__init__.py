"""Chromium: pages judged in Debian's Chromium through Playwright, and recorded as videos."""
