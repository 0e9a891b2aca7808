// A run's page: ask for its live section again every few seconds and swap it in place,
// until the server says the run has ended. The page itself is never reloaded.
"use strict";
(() => {
  const box = document.getElementById("live");
  const status = document.getElementById("live-status");
  if (!box || box.dataset.ended === "true") return;
  const everyMs = Number(box.dataset.everyMs) || 2000;
  const tick = async () => {
    let ended = false;
    try {
      const response = await fetch(box.dataset.src, {cache: "no-store", credentials: "same-origin"});
      if (response.ok) {
        box.innerHTML = await response.text();
        ended = response.headers.get("X-Swarm-Run-Ended") === "1";
        box.dataset.ended = String(ended);
        if (status) {
          status.textContent = ended
            ? "the run has ended"
            : `following the run: updated ${new Date().toLocaleTimeString()}`;
        }
      } else if (status) {
        status.textContent = `could not update (HTTP ${response.status}); trying again`;
      }
    } catch (error) {
      if (status) status.textContent = "could not reach the server; trying again";
    }
    if (!ended) setTimeout(tick, everyMs);
  };
  setTimeout(tick, everyMs);
})();
