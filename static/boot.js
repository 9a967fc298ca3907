// The page's first request: /api/boot for the view the URL hash names (docs: "JSON API", /api/boot), sent while the
// page's modules load. A classic script that blocks the parser (templates/index.html): it runs as soon as it
// arrives, where an async module waited for a free main thread. It imports nothing; api.boot takes the response
// when it asks for the same path (a single-file export has no boot.js: its page asks nothing).
"use strict";
(() => {
  // the hash's view keys as static/router.js reads them (an id is digits only; anything else is no id), in the
  // query api.boot writes for them
  const q = new URLSearchParams(location.hash.replace(/^#/, ""));
  const keys = [["t", "t"], ["ctx", "c"], ["rw", "r"], ["step", "s"]];
  const args = keys.filter(([, k]) => /^\d+$/.test(q.get(k) ?? "")).map(([a, k]) => `${a}=${Number(q.get(k))}`);
  const path = `/api/boot?${args.concat(["compact=1", "pack=1"]).join("&")}`;
  globalThis.tinyvizBoot = {path, response: fetch(path, {headers: {Accept: "application/json"}})};
})();
