// The structural hashes of viz_server/diff.py (structural_hashes, _digests) computed in a single-file export's page
// instead of embedded (for diff.js's GET /api/diff): BLAKE2b with a 16-byte digest (RFC 7693) over each node's op,
// dtype and arg (each as an 8-byte little endian length and its UTF-8 bytes, lone surrogates as Python's
// "surrogatepass" writes them) and then its sources' digests. 64-bit words are pairs of 32-bit halves (lo at even
// index, hi at odd). tests/viewer/test_export_pack.py holds it to diff.py's on a real trace's graph and odd strings.
const tinyvizHash = (() => {
  const IV = new Uint32Array([0xf3bcc908, 0x6a09e667, 0x84caa73b, 0xbb67ae85, 0xfe94f82b, 0x3c6ef372,
    0x5f1d36f1, 0xa54ff53a, 0xade682d1, 0x510e527f, 0x2b3e6c1f, 0x9b05688c, 0xfb41bd6b, 0x1f83d9ab,
    0x137e2179, 0x5be0cd19]);
  const SIGMA = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4], [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
    [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13], [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
    [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11], [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
    [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5], [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
  ];
  const v = new Uint32Array(32), m = new Uint32Array(32);

  function add(a, b) {  // v[a] += v[b] (64-bit)
    const lo = v[a] + v[b];
    v[a + 1] = v[a + 1] + v[b + 1] + (lo >= 0x100000000 ? 1 : 0);
    v[a] = lo;
  }
  function addM(a, i) {  // v[a] += m[i]
    const lo = v[a] + m[i];
    v[a + 1] = v[a + 1] + m[i + 1] + (lo >= 0x100000000 ? 1 : 0);
    v[a] = lo;
  }
  function xorRot(d, a, n) {  // v[d] = rotr64(v[d] ^ v[a], n)
    const lo = v[d] ^ v[a], hi = v[d + 1] ^ v[a + 1];
    if (n === 32) { v[d] = hi; v[d + 1] = lo; return; }
    if (n < 32) { v[d] = (lo >>> n) | (hi << (32 - n)); v[d + 1] = (hi >>> n) | (lo << (32 - n)); return; }
    n -= 32;  // (63: a rotation by 32 then by 31)
    v[d] = (hi >>> n) | (lo << (32 - n)); v[d + 1] = (lo >>> n) | (hi << (32 - n));
  }
  function G(a, b, c, d, x, y) {
    add(a, b); addM(a, x); xorRot(d, a, 32);
    add(c, d); xorRot(b, c, 24);
    add(a, b); addM(a, y); xorRot(d, a, 16);
    add(c, d); xorRot(b, c, 63);
  }

  function compress(h, block, t, last) {
    for (let i = 0; i < 16; i++) { v[i] = h[i]; v[i + 16] = IV[i]; }
    v[24] ^= t;  // (a hashed node is far below 2^32 bytes: the counter's high words stay 0)
    if (last) { v[28] = ~v[28]; v[29] = ~v[29]; }
    for (let i = 0; i < 32; i++) {
      m[i] = block[i * 4] | (block[i * 4 + 1] << 8) | (block[i * 4 + 2] << 16) | (block[i * 4 + 3] << 24);
    }
    for (let r = 0; r < 12; r++) {
      const s = SIGMA[r % 10];
      G(0, 8, 16, 24, s[0] * 2, s[1] * 2); G(2, 10, 18, 26, s[2] * 2, s[3] * 2);
      G(4, 12, 20, 28, s[4] * 2, s[5] * 2); G(6, 14, 22, 30, s[6] * 2, s[7] * 2);
      G(0, 10, 20, 30, s[8] * 2, s[9] * 2); G(2, 12, 22, 24, s[10] * 2, s[11] * 2);
      G(4, 14, 16, 26, s[12] * 2, s[13] * 2); G(6, 8, 18, 28, s[14] * 2, s[15] * 2);
    }
    for (let i = 0; i < 16; i++) h[i] ^= v[i] ^ v[i + 16];
  }

  /** BLAKE2b-128 of bytes (a Uint8Array). */
  function blake2b16(bytes) {
    const h = IV.slice();
    h[0] ^= 0x01010000 ^ 16;  // depth 1, fanout 1, no key, 16-byte digest
    const block = new Uint8Array(128);
    let off = 0;
    while (bytes.length - off > 128) {
      compress(h, bytes.subarray(off, off + 128), off + 128, false);
      off += 128;
    }
    block.fill(0);
    block.set(bytes.subarray(off));
    compress(h, block, bytes.length, true);
    const out = new Uint8Array(16);
    for (let i = 0; i < 16; i++) out[i] = h[i >> 2] >>> (8 * (i & 3));
    return out;
  }

  /** UTF-8 bytes of a JS string, a lone surrogate as its own 3-byte form (Python's "surrogatepass"). */
  function utf8(s) {
    const out = [];
    for (let i = 0; i < s.length; i++) {
      let c = s.charCodeAt(i);
      const d = s.charCodeAt(i + 1);
      if (c >= 0xd800 && c < 0xdc00 && d >= 0xdc00 && d < 0xe000) {  // a surrogate pair: one code point
        c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
        i++;
      }
      if (c < 0x80) out.push(c);
      else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
      else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
      else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    }
    return out;
  }

  /** The 16-byte structural digest of a node from its (op, dtype, arg) and its sources' digests. */
  function nodeDigest(op, dtype, arg, srcDigests) {
    const parts = [];
    for (const s of [op, dtype, arg]) {
      const b = utf8(s);
      let n = b.length;
      for (let i = 0; i < 8; i++) { parts.push(n % 256); n = Math.floor(n / 256); }
      for (const x of b) parts.push(x);
    }
    for (const d of srcDigests) for (const x of d) parts.push(x);
    return blake2b16(Uint8Array.from(parts));
  }

  const hex = (bytes, n) => [...bytes.subarray(0, n)].map((b) => b.toString(16).padStart(2, "0")).join("");

  /** hashOf(id) -> 8-hex structural hash, memoized; fields(id) -> [op, dtype, arg, src] (sources hashed first, with
   * an explicit stack: graphs are deep). shared: the digests of ids below 2^40 (trace nodes, the same in every
   * rewrite), kept across hashers. */
  function hasher(fields, shared = new Map()) {
    const own = new Map();
    const memo = (x) => (x >= 2 ** 40 ? own : shared);
    return (id) => {
      const stack = [id];
      while (stack.length) {
        const x = stack[stack.length - 1];
        if (memo(x).has(x)) { stack.pop(); continue; }
        const [op, dtype, arg, src] = fields(x);
        const todo = src.filter((s) => !memo(s).has(s));
        if (todo.length) { stack.push(...todo); continue; }
        stack.pop();
        memo(x).set(x, nodeDigest(op, dtype, arg, src.map((s) => memo(s).get(s))));
      }
      return hex(memo(id).get(id), 4);
    };
  }

  return {blake2b16, nodeDigest, hasher, hex};
})();
