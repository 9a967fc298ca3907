// The first script of a single-file export (viz_server/export/page.py; no server route: the served page loads its
// modules): the page's UI and its data are embedded deflated and in base-85 digits (a third of the UI's size; page.py's
// _digits writes them); this decodes the UI and runs it as the inline module whose hash the page's
// Content-Security-Policy names (the only other script it allows). The UI's shim.js decodes the data with the same
// inflate (globalThis.tinyvizExportBoot; static/boot.js's tinyvizBoot is the served page's early /api/boot).
globalThis.tinyvizExportBoot = (() => {
  // RFC 1924's base-85 digits with & < > ` as , . / : (nothing a page has to escape)
  const DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%,()*+-;.=/?@^_:{|}~";
  const value = new Uint8Array(128);
  for (let i = 0; i < DIGITS.length; i++) value[DIGITS.charCodeAt(i)] = i;

  /** The first n bytes of base-85 text (5 digits per 4 bytes, big-endian). */
  function base85(text, n) {
    const out = new Uint8Array(Math.ceil(text.length / 5) * 4);
    for (let i = 0, o = 0; i < text.length; i += 5, o += 4) {
      let x = 0;
      for (let j = 0; j < 5; j++) x = x * 85 + value[text.charCodeAt(i + j)];
      out[o] = x >>> 24; out[o + 1] = (x >>> 16) & 255; out[o + 2] = (x >>> 8) & 255; out[o + 3] = x & 255;
    }
    return out.subarray(0, n);
  }

  /** The text of an embedded {n, data} part: base-85 digits of deflated UTF-8. */
  async function inflate(part) {
    const stream = new Blob([base85(part.data, part.n)]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new TextDecoder().decode(await new Response(stream).arrayBuffer());
  }

  const block = JSON.parse(document.getElementById("tinyviz-export").textContent);
  inflate(block.ui).then((ui) => {
    const s = document.createElement("script");
    s.type = "module";
    s.textContent = ui;
    document.body.append(s);
  });
  return {DIGITS, base85, inflate, block};
})();
