// The page's first request, sent as soon as this small module (and api.js) has arrived, while the other modules are
// still loading: /api/boot for the view the URL hash names (templates/index.html runs it as an async module before
// app.js). app.js asks api.boot for the same view, and gets this request's answer (docs: "JSON API", /api/boot).
import {api} from "./api.js";

// the hash's view keys as static/router.js reads them (an id is digits only; anything else is no id)
const q = new URLSearchParams(location.hash.replace(/^#/, ""));
const id = (k) => (/^\d+$/.test(q.get(k) ?? "") ? Number(q.get(k)) : null);
api.boot({trace: id("t"), ctx: id("c"), rw: id("r"), step: id("s")}).catch(() => {});
