// Live parts of a page: every element with data-live and an id is fetched again every
// data-refresh seconds (the same URL, rendered by the server) and replaced in place.
// Nothing else runs here; the pages work without it.
(function () {
  "use strict";
  const live = document.querySelectorAll("[data-live][id]");
  if (!live.length) return;
  const seconds = Math.max(1, Number(live[0].dataset.refresh || 5));
  let busy = false;
  async function refresh() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const answer = await fetch(window.location.href);
      if (!answer.ok) return;
      const doc = new DOMParser().parseFromString(await answer.text(), "text/html");
      for (const old of document.querySelectorAll("[data-live][id]")) {
        const fresh = doc.getElementById(old.id);
        if (fresh) old.replaceWith(document.importNode(fresh, true));
      }
    } catch (e) {
      // the console or the cluster is away: try again at the next tick
    } finally {
      busy = false;
    }
  }
  window.setInterval(refresh, seconds * 1000);
})();
