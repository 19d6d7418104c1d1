#!/usr/bin/env bash
# Headless Chromium for the inspector test: Debian's `chromium` (installed when missing and running as
# root, as CI does on a bare machine). Prints the browser's path. Playwright drives it
# (executable_path), so no browser is downloaded by Playwright.
set -euo pipefail
find_browser() { command -v chromium || command -v chromium-browser || true; }
if [ -z "$(find_browser)" ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) >&2
  else
    echo "Chromium is not installed (apt-get install chromium)" >&2
    exit 1
  fi
fi
find_browser
